// ckptd: flags -> DaemonOptions -> NodeDaemon. Wiring only.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "daemon/coordinator/fault_points.h"
#include "daemon/server/node_daemon.h"

ABSL_FLAG(std::string, storage_root, "", "Directory (or mount) that holds the checkpoints");
ABSL_FLAG(std::string, storage_backend, "posix", "posix or memory (memory: testing only)");
ABSL_FLAG(bool, io_uring, true, "Write and read through io_uring (else pread/pwrite)");
ABSL_FLAG(bool, o_direct, true, "Bypass the page cache where the filesystem allows");
ABSL_FLAG(uint32_t, queue_depth, 32, "I/O operations in flight per writer thread");
ABSL_FLAG(std::string, pool_path, "", "Shared-memory file of the pool (default: /dev/shm/ckptd-<hash of socket path>.pool)");
ABSL_FLAG(uint64_t, pool_bytes, 1ull << 30, "Pinned staging memory, allocated at start-up");
ABSL_FLAG(std::string, socket_path, "/run/ckptd/ckptd.sock", "Unix socket for ranks and ckptctl");
ABSL_FLAG(std::string, listen_address, "", "TCP address for ckptctl and peers, e.g. 0.0.0.0:7470");
ABSL_FLAG(std::string, host_name, "", "Name of this host in data files (default: hostname)");
ABSL_FLAG(int32_t, writer_threads, 4, "Writer threads (one data file and one io_uring each)");
ABSL_FLAG(int32_t, writer_nice, 10, "Nice value of writer threads (0: same priority as ranks)");
ABSL_FLAG(int32_t, reader_threads, 4, "Reader threads per load");
ABSL_FLAG(uint64_t, chunk_bytes, 4 << 20, "Checksum and write unit (multiple of 4096)");
ABSL_FLAG(uint64_t, batch_bytes, 32 << 20,
          "Pool room a rank copies into at a time, and a load's read-ahead unit: saves and "
          "loads of any size stream through the pool this much at a time");
ABSL_FLAG(double, job_pool_share, 0,
          "Most of the pool one job may hold while others wait, as a fraction (0: fair share "
          "among the jobs that want room)");
ABSL_FLAG(int32_t, max_sessions, 4096, "Attached ranks at once, over all jobs");
ABSL_FLAG(int32_t, max_world_size, 65536, "Ranks in one job");
ABSL_FLAG(int32_t, plan_timeout_s, 120, "Abort a save or load whose ranks do not all arrive in time");
ABSL_FLAG(int32_t, snapshot_timeout_s, 300, "Abort a save whose ranks do not all snapshot in time");
ABSL_FLAG(int32_t, pool_wait_timeout_s, 60, "How long a save or load may wait for pool room");
ABSL_FLAG(std::string, fault_kill_at, "", "Testing: SIGKILL this process at the named fault point");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ckptd: the ckpt node daemon (with the embedded coordinator)");
  absl::ParseCommandLine(argc, argv);
  ckpt::ArmFaultPoint(absl::GetFlag(FLAGS_fault_kill_at));

  // Signals are taken by one thread with sigwait; block them everywhere else.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ckpt::server::DaemonOptions o;
  o.storage_root = absl::GetFlag(FLAGS_storage_root);
  o.storage_backend = absl::GetFlag(FLAGS_storage_backend);
  o.use_io_uring = absl::GetFlag(FLAGS_io_uring);
  o.use_o_direct = absl::GetFlag(FLAGS_o_direct);
  o.queue_depth = absl::GetFlag(FLAGS_queue_depth);
  o.pool_path = absl::GetFlag(FLAGS_pool_path);
  o.pool_bytes = absl::GetFlag(FLAGS_pool_bytes);
  o.socket_path = absl::GetFlag(FLAGS_socket_path);
  o.listen_address = absl::GetFlag(FLAGS_listen_address);
  o.host_name = absl::GetFlag(FLAGS_host_name);
  o.writer_threads = absl::GetFlag(FLAGS_writer_threads);
  o.reader_threads = absl::GetFlag(FLAGS_reader_threads);
  o.writer_nice = absl::GetFlag(FLAGS_writer_nice);
  o.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  o.batch_bytes = absl::GetFlag(FLAGS_batch_bytes);
  o.job_pool_share = absl::GetFlag(FLAGS_job_pool_share);
  o.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  o.max_world_size = absl::GetFlag(FLAGS_max_world_size);
  o.plan_timeout = absl::Seconds(absl::GetFlag(FLAGS_plan_timeout_s));
  o.snapshot_timeout = absl::Seconds(absl::GetFlag(FLAGS_snapshot_timeout_s));
  o.pool_wait_timeout = absl::Seconds(absl::GetFlag(FLAGS_pool_wait_timeout_s));

  absl::StatusOr<std::unique_ptr<ckpt::server::NodeDaemon>> daemon =
      ckpt::server::NodeDaemon::Create(o);
  if (!daemon.ok()) {
    absl::FPrintF(stderr, "ckptd: cannot start: %s\n", daemon.status().ToString());
    return 1;
  }
  if (absl::Status s = (*daemon)->Start(); !s.ok()) {
    absl::FPrintF(stderr, "ckptd: cannot start: %s\n", s.ToString());
    return 1;
  }
  const auto& opts = (*daemon)->options();
  absl::FPrintF(stderr,
                "ckptd: serving on unix:%s%s%s; storage %s (%s); pool %d bytes at %s; %s; "
                "removed %d stale partial directories\n",
                opts.socket_path, opts.listen_address.empty() ? "" : " and ", opts.listen_address,
                opts.storage_root, opts.storage_backend, opts.pool_bytes, opts.pool_path,
                (*daemon)->DescribeDevice(), (*daemon)->removed_partials());
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    absl::FPrintF(stderr, "ckptd: signal %d, shutting down\n", sig);
    (*daemon)->Shutdown();
  });
  signal_thread.detach();
  (*daemon)->Wait();
  daemon->reset();
  return 0;
}
