// What every ckpt-bench mode shares: its settings, its work directory, the
// ckptd it starts and the rank processes it drives through phases together.
#ifndef CKPT_TOOLS_BENCH_BENCH_RUN_H_
#define CKPT_TOOLS_BENCH_BENCH_RUN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/bench/child_process.h"

namespace ckpt::bench {

struct Config {
  std::string dir;
  double state_gib = 2;
  int ranks = 2;
  int compute_ms = 1000;
  int every = 2;
  int checkpoints = 3;
  int writer_threads = 4;
  int reader_threads = 0;  // 0: ckptd's default (2, or 4 on an object store)
  int writer_nice = 10;
  int batch_mib = 32;
  int copy_threads = 4;
  double pool_gib = 0;  // 0: room for two snapshots
  bool json = false;
  bool keep_host = false;             // leave shmem_enabled as it is
  bool memory_tier = false;           // the memory tier's figures instead of storage's
  bool gpu = false;                   // the GPU path's figures (gpu_bench.h)
  bool codecs = false;                // the chunk codecs' figures (codec_bench.h)
  bool s3 = false;                    // ckptd on an S3 root against boto3/awscli (s3_bench.h)
  std::string s3_endpoint;            // with s3: this server (else Swift, started here)
  std::string gpu_transfer = "pull";  // or push: how GPU tensors travel
  std::string ckptd;
  // With codecs: safetensors files to measure instead of the synthetic
  // state (a second one: the next step, for the delta ratios).
  std::vector<std::string> codec_files;
};

// A run's state size, work directory under --dir (made here) and socket;
// Fail reports an error, removes the directory, and gives the exit code.
struct Workspace {
  explicit Workspace(const Config& c);
  int Fail(const absl::Status& s) const;
  const uint64_t bytes;
  const std::string work;
  const std::string socket;
};

// This program's path, for starting its rank processes.
std::string SelfPath();

// Sends a command to every worker, then collects every answer's numbers
// (the workers run the phase at the same time).
absl::StatusOr<std::vector<std::vector<double>>> Broadcast(
    std::vector<std::unique_ptr<ChildProcess>>& workers, const std::string& command);

// The slowest rank's value of column `col`: a collective step waits for it.
double MaxOver(const std::vector<std::vector<double>>& answers, size_t col);

// `world` rank processes (`ckpt-bench --worker ... <role_flags>`), each
// ready (it printed "ready") when this returns.
absl::StatusOr<std::vector<std::unique_ptr<ChildProcess>>> StartWorkers(
    const Config& c, const std::string& socket, int world, uint64_t bytes,
    const std::vector<std::string>& role_flags);

// The pool: --pool-gib, by default room for two snapshots (one fills while
// the other drains).
uint64_t PoolBytes(const Config& c, uint64_t bytes);

// The reader threads ckptd runs on a directory root.
inline int ReaderThreads(const Config& c) { return c.reader_threads > 0 ? c.reader_threads : 2; }

// This run's ckptd, serving once it returns.
absl::StatusOr<std::unique_ptr<ChildProcess>> StartDaemon(const Config& c, const std::string& work,
                                                          const std::string& socket, uint64_t pool,
                                                          std::vector<std::string> extra_flags);

// How a run reports: its figures one per line, each goal with ok or
// MISSED, and (--json) one line with the run's own fields (`head`: JSON
// members without the braces) followed by every figure.
struct Goal {
  std::string name;
  double value = 0;
  double limit = 0;
  bool at_most = false;  // the figure must stay at or under the limit
};
void PrintFigures(const std::map<std::string, double>& f);
void PrintGoals(const std::vector<Goal>& goals);
void PrintJsonLine(const std::string& head, const std::map<std::string, double>& f);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_BENCH_RUN_H_
