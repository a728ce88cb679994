// ckpt-bench: a simulated training loop on this machine, measuring what a
// checkpoint costs the trainer against the physical floors, all in one run
// (the machines are shared and noisy: only same-run ratios mean anything).
//
//   ckpt-bench --dir DIR --state-gib 2 --ranks 2 [--pool-gib P] --json
//   ckpt-bench --dir DIR --gpu ...      the GPU path (gpu_bench.h)
//   ckpt-bench --codecs ...             the chunk codecs (codec_bench.h)
//   ckpt-bench --s3 ...                 an S3 root against boto3 and awscli (s3_bench.h)
//
// It starts its own ckptd, R rank processes holding S GiB in total, and
// prints a table and (--json) one JSON line. See docs/measuring.md for the fields.
// The pool defaults to room for two snapshots; a smaller one (--pool-gib)
// shows the state streaming through it.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "daemon/pool/huge_pages.h"
#include "tools/bench/bench_run.h"
#include "tools/bench/bench_worker.h"
#include "tools/bench/child_process.h"
#include "tools/bench/codec_bench.h"
#include "tools/bench/disk_baseline.h"
#include "tools/bench/gpu_bench.h"
#include "tools/bench/gpu_worker.h"
#include "tools/bench/median.h"
#include "tools/bench/rss_sampler.h"
#include "tools/bench/s3_bench.h"

namespace ckpt::bench {
namespace {

// deploy/ckptd.service gives the pool huge pages where the host gives
// shared memory none (daemon/pool/huge_pages.h); a bench that starts its
// own ckptd does the same for its run, says so, and puts the setting back.
class ServiceHostSetup {
 public:
  explicit ServiceHostSetup(bool keep) {
    if (keep) return;
    setting_.emplace();
    if (setting_->changed()) {
      absl::FPrintF(stderr, "ckpt-bench: %s set to advise for this run, as ckptd.service does\n",
                    pool::kShmemHugeSetting);
    } else if (setting_->old_setting() == "never") {
      absl::FPrintF(stderr,
                    "ckpt-bench: %s is never and this is not root: the pool gets 4 KiB pages, "
                    "not what ckptd.service sets up\n",
                    pool::kShmemHugeSetting);
    }
  }

 private:
  std::optional<pool::ScopedShmemHugeAdvise> setting_;
};

// The committed steps under a job's directory, newest first.
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> CommittedSteps(
    const std::string& job_dir) {
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(job_dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (entry.is_directory() && absl::StartsWith(name, "step-") &&
        absl::SimpleAtoi(name.substr(5), &step)) {
      steps.emplace_back(step, entry.path().string());
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat("list ", job_dir, ": ", ec.message()));
  std::sort(steps.begin(), steps.end(), std::greater<>());
  return steps;
}

// A step's data files (everything of at least one read block).
std::vector<std::string> DataFiles(const std::string& step_dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(step_dir, ec)) {
    if (entry.is_regular_file(ec) && entry.file_size(ec) >= (8u << 20)) {
      files.push_back(entry.path().string());
    }
  }
  return files;
}

// Restores of `step` from memory by `workers`, each against the floor
// measured right before it in the same processes: the medians, as
// <prefix>_gbps, <prefix>_over_memcpy and `floor_key`.
absl::Status MeasureRestores(const Config& c, std::vector<std::unique_ptr<ChildProcess>>& workers,
                             uint64_t bytes, int64_t step, const std::string& prefix,
                             const std::string& floor_key, std::map<std::string, double>& f) {
  std::vector<double> floors, restores, ratios;
  for (int k = 0; k < c.checkpoints; ++k) {
    // Into the tensors the load fills (bench_worker.h).
    auto floor = Broadcast(workers, "floor in");
    if (!floor.ok()) return floor.status();
    auto load = Broadcast(workers, absl::StrCat("load ", step, " memory"));
    if (!load.ok()) return load.status();
    floors.push_back(bytes / MaxOver(*floor, 0) / 1e9);
    restores.push_back(bytes / MaxOver(*load, 0) / 1e9);
    ratios.push_back(restores.back() / floors.back());
    absl::FPrintF(stderr, "ckpt-bench: %s %d: memcpy %.3f GB/s, restore %.3f GB/s: %.3f\n", prefix,
                  k, floors.back(), restores.back(), ratios.back());
  }
  f[floor_key] = Median(floors);
  f[prefix + "_gbps"] = Median(restores);
  f[prefix + "_over_memcpy"] = Median(ratios);
  return absl::OkStatus();
}

// Reads the daemon's output up to its check of `job`'s step `step` made
// as a rank attached (daemon/tier/early_step_check.h); its duration_s.
absl::StatusOr<double> AwaitEarlyCheck(ChildProcess& daemon, const std::string& job, int64_t step) {
  const std::string wanted = absl::StrCat("ckptd: memory-check job=", job, " step=", step, " ");
  for (;;) {
    absl::StatusOr<std::string> line = daemon.ReadLine();
    if (!line.ok()) return line.status();
    if (line->find("ckptd: load job=") != std::string::npos) {
      absl::FPrintF(stderr, "ckpt-bench: %s\n", *line);
    }
    if (line->find(wanted) == std::string::npos) continue;
    const size_t at = line->find("duration_s=");
    if (at == std::string::npos) return absl::InternalError("no duration_s in " + *line);
    return std::atof(line->c_str() + at + 11);
  }
}

// The memory tier (--memory-tier): what an every-step save to the daemon's
// memory costs the trainer, and how fast a trainer restores from it, each
// against the memcpy floor measured right before it in the same processes
// (the machine's memory bandwidth swings from minute to minute).
//
// Restores: by the processes that saved (they attached before the step
// existed, so the load verifies every byte as the ranks copy it), and by
// new ones, a restarted trainer: once right after they attach (the load
// waits for the check ckptd began then), then once ckptd has verified the
// step as they attached (which it does while a trainer builds its model):
// the load then only copies.
int RunMemoryTier(const Config& c) {
  const Workspace ws(c);
  const uint64_t bytes = ws.bytes;
  const std::string& work = ws.work;
  const std::string& socket = ws.socket;
  auto fail = [&](const absl::Status& s) { return ws.Fail(s); };
  std::map<std::string, double> f;
  const uint64_t pool = PoolBytes(c, bytes);
  // The newest step and the one being written, with room for padding.
  const uint64_t tier = 2 * bytes + (256ull << 20);
  f["pool_gib"] = pool / double(1ull << 30);
  f["memory_tier_gib"] = tier / double(1ull << 30);
  auto daemon = StartDaemon(c, work, socket, pool, {absl::StrCat("--memory_tier_bytes=", tier)});
  if (!daemon.ok()) return fail(daemon.status());
  int64_t last_step = 0;
  {
    auto workers = StartWorkers(c, socket, c.ranks, bytes, {"--save-worker"});
    if (!workers.ok()) return fail(workers.status());
    absl::FPrintF(stderr, "ckpt-bench: %d ranks hold %.2f GiB; %d memory-tier saves...\n", c.ranks,
                  bytes / double(1 << 30), c.checkpoints);
    std::vector<double> floors, stalls, commits;
    for (int k = 0; k < c.checkpoints; ++k) {
      auto floor = Broadcast(*workers, "floor");
      if (!floor.ok()) return fail(floor.status());
      floors.push_back(MaxOver(*floor, 0));
      last_step = 100 + k;
      auto a = Broadcast(*workers, absl::StrCat("blocking ", last_step, " memory"));
      if (!a.ok()) return fail(a.status());
      stalls.push_back(MaxOver(*a, 0));
      commits.push_back(MaxOver(*a, 1));
      absl::FPrintF(stderr,
                    "ckpt-bench: memory save %d: floor %.3f s, stall %.3f s, commit %.3f s\n", k,
                    floors.back(), stalls.back(), commits.back());
    }
    f["save_memcpy_floor_s"] = Median(floors);
    f["stall_memory_s"] = Median(stalls);
    f["memory_commit_s"] = Median(commits);
    f["stall_memory_over_floor"] = f["stall_memory_s"] / f["save_memcpy_floor_s"];
    absl::FPrintF(stderr,
                  "ckpt-bench: the same %d ranks restore step %d from memory, verifying, %d "
                  "times...\n",
                  c.ranks, last_step, c.checkpoints);
    absl::Status s = MeasureRestores(c, *workers, bytes, last_step, "memory_restore_verifying",
                                     "memcpy_floor_verifying_gbps", f);
    if (!s.ok()) return fail(s);
    for (auto& w : *workers) (void)w->Send("quit");
  }
  {
    // A restarted trainer: new processes, the same sharding.
    auto workers = StartWorkers(c, socket, c.ranks, bytes, {"--load-worker"});
    if (!workers.ok()) return fail(workers.status());
    // Once right away, as a trainer with nothing to build would: the load
    // waits for the check begun as the ranks attached. One sample.
    auto first = Broadcast(*workers, absl::StrCat("load ", last_step, " memory"));
    if (!first.ok()) return fail(first.status());
    auto first_floor = Broadcast(*workers, "floor in");
    if (!first_floor.ok()) return fail(first_floor.status());
    f["memory_restore_at_attach_gbps"] = bytes / MaxOver(*first, 0) / 1e9;
    f["memory_restore_at_attach_over_memcpy"] =
        f["memory_restore_at_attach_gbps"] / (bytes / MaxOver(*first_floor, 0) / 1e9);
    absl::StatusOr<double> check = AwaitEarlyCheck(**daemon, "bench", last_step);
    if (!check.ok()) return fail(check.status());
    f["memory_check_s"] = *check;
    absl::FPrintF(stderr,
                  "ckpt-bench: ckptd verified step %d in %.3f s as the new ranks attached; they "
                  "restore it from memory %d times...\n",
                  last_step, *check, c.checkpoints);
    absl::Status s =
        MeasureRestores(c, *workers, bytes, last_step, "memory_restore", "memcpy_floor_gbps", f);
    if (!s.ok()) return fail(s);
    for (auto& w : *workers) (void)w->Send("quit");
  }
  (*daemon)->Stop();
  for (absl::StatusOr<std::string> line; (line = (*daemon)->ReadLine()).ok();) {
    if (line->find("ckptd: load job=") != std::string::npos) {
      absl::FPrintF(stderr, "ckpt-bench: %s\n", *line);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  absl::PrintF("ckpt-bench --memory-tier: %.2f GiB, %d ranks\n", c.state_gib, c.ranks);
  PrintFigures(f);
  PrintGoals({{"memory_restore / memcpy_floor", f["memory_restore_over_memcpy"], 0.8}});
  if (c.json) {
    PrintJsonLine(absl::StrFormat("\"mode\":\"memory_tier\",\"state_gib\":%.3f,\"ranks\":%d",
                                  c.state_gib, c.ranks),
                  f);
  }
  return 0;
}

int Run(const Config& c) {
  const Workspace ws(c);
  const uint64_t bytes = ws.bytes;
  const std::string& work = ws.work;
  const std::string& socket = ws.socket;
  auto fail = [&](const absl::Status& s) { return ws.Fail(s); };
  std::map<std::string, double> f;  // the figures

  absl::FPrintF(stderr, "ckpt-bench: measuring the disk under %s with %.2f GiB...\n", c.dir,
                bytes / double(1 << 30));
  absl::StatusOr<DiskFigures> disk = MeasureDisk(work, bytes, {.streams = c.writer_threads});
  if (!disk.ok()) return fail(disk.status());
  f["disk_write_gbps"] = disk->write_gbps;
  f["disk_read_gbps"] = disk->read_gbps;
  for (const auto& [way, gbps] : disk->ways) f[way] = gbps;

  const uint64_t pool = PoolBytes(c, bytes);
  f["pool_gib"] = pool / double(1ull << 30);
  auto daemon = StartDaemon(c, work, socket, pool, {});
  if (!daemon.ok()) return fail(daemon.status());
  f["pool_huge_fraction"] = pool::ShmemHugePageBytes((*daemon)->pid()) / double(pool);
  auto heap = std::make_unique<RssSampler>((*daemon)->pid());

  {
    auto workers = StartWorkers(c, socket, c.ranks, bytes, {"--save-worker"});
    if (!workers.ok()) return fail(workers.status());
    absl::FPrintF(stderr, "ckpt-bench: %d ranks hold %.2f GiB\n", c.ranks, bytes / double(1 << 30));
    // The floor is measured right before each blocking checkpoint, so both
    // see the same machine (memory bandwidth here swings by 1.5x from
    // minute to minute); both report the median of the slowest rank.
    absl::FPrintF(stderr, "ckpt-bench: %d blocking checkpoints, each after a floor...\n",
                  c.checkpoints);
    std::vector<double> floors, stalls, persists;
    for (int k = 0; k < c.checkpoints; ++k) {
      auto floor = Broadcast(*workers, "floor");
      if (!floor.ok()) return fail(floor.status());
      floors.push_back(MaxOver(*floor, 0));
      auto a = Broadcast(*workers, absl::StrCat("blocking ", 100 + k));
      if (!a.ok()) return fail(a.status());
      stalls.push_back(MaxOver(*a, 0));
      persists.push_back(MaxOver(*a, 1));
      absl::FPrintF(stderr,
                    "ckpt-bench: checkpoint %d: floor %.3f s, stall %.3f s, persist %.3f s\n", k,
                    floors.back(), stalls.back(), persists.back());
    }
    f["memcpy_floor_s"] = Median(floors);
    f["stall_blocking_s"] = Median(stalls);
    f["persist_s"] = Median(persists);
    f["persist_gbps"] = bytes / f["persist_s"] / 1e9;

    absl::FPrintF(stderr,
                  "ckpt-bench: training loop, %d ms compute, a lazy checkpoint every %d steps...\n",
                  c.compute_ms, c.every);
    auto lazy = Broadcast(
        *workers, absl::StrCat("lazy 1000 ", c.checkpoints, " ", c.every, " ", c.compute_ms));
    if (!lazy.ok()) return fail(lazy.status());
    std::vector<double> lazy_stalls;
    for (int k = 0; k < c.checkpoints; ++k) lazy_stalls.push_back(MaxOver(*lazy, k));
    f["stall_lazy_s"] = Median(lazy_stalls);

    absl::FPrintF(stderr,
                  "ckpt-bench: the plain way (write + fsync per rank, in the trainer)...\n");
    auto baseline = Broadcast(*workers, "baseline " + work);
    if (!baseline.ok()) return fail(baseline.status());
    f["sync_baseline_s"] = MaxOver(*baseline, 0);
    for (auto& w : *workers) (void)w->Send("quit");
  }
  {
    // This disk's read rate swings by 2x from one second to the next, and it
    // serves bytes read once before faster the second time. So the load is
    // measured in pairs, as the stall is against its floor: each pair loads
    // one committed step and reads another, never read before, written in
    // the same phase and as large, with the parallel way (a ring per data
    // file at queue depth 16: the best way on this disk, by the start-of-run
    // figures, which stay in the output). Which comes first alternates, and
    // the figures are the medians over pairs.
    absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> steps =
        CommittedSteps(work + "/root/bench");
    if (!steps.ok()) return fail(steps.status());
    const int pairs = std::min<int>(c.checkpoints, static_cast<int>(steps->size() / 2));
    if (pairs < 1) return fail(absl::FailedPreconditionError("fewer than two committed steps"));
    const int load_ranks = c.ranks + 1;
    absl::FPrintF(stderr,
                  "ckpt-bench: %d ranks load %d steps (resharded from %d), each paired with a "
                  "read of another step's files...\n",
                  load_ranks, pairs, c.ranks);
    auto workers = StartWorkers(c, socket, load_ranks, bytes, {"--load-worker"});
    if (!workers.ok()) return fail(workers.status());
    std::vector<double> loads, reads, ratios;
    for (int k = 0; k < pairs; ++k) {
      const int64_t load_step = (*steps)[2 * k].first;
      ReadSets sets;
      sets.parallel = DataFiles((*steps)[2 * k + 1].second);
      absl::StatusOr<DiskFigures> read;
      absl::StatusOr<std::vector<std::vector<double>>> load;
      if (k % 2 == 0) read = MeasureReads(sets, "pair_", {.streams = c.writer_threads});
      load = Broadcast(*workers, absl::StrCat("load ", load_step));
      if (k % 2 == 1) read = MeasureReads(sets, "pair_", {.streams = c.writer_threads});
      if (!read.ok()) return fail(read.status());
      if (!load.ok()) return fail(load.status());
      loads.push_back(bytes / MaxOver(*load, 0) / 1e9);
      reads.push_back(read->read_gbps);
      ratios.push_back(loads.back() / reads.back());
      absl::FPrintF(stderr,
                    "ckpt-bench: pair %d: load of step %d %.3f GB/s, read of step %d %.3f GB/s: "
                    "%.3f\n",
                    k, load_step, loads.back(), (*steps)[2 * k + 1].first, reads.back(),
                    ratios.back());
    }
    for (auto& w : *workers) (void)w->Send("quit");
    f["disk_read_fresh_gbps"] = f["disk_read_gbps"];
    f["disk_read_gbps"] = Median(reads);
    f["load_gbps"] = Median(loads);
    f["load_s"] = bytes / f["load_gbps"] / 1e9;
    f["load_pairs"] = pairs;
    f["load_ratio_median"] = Median(ratios);
  }
  f["daemon_heap_mib"] = heap->peak_anon_bytes() / double(1 << 20);
  heap.reset();
  (*daemon)->Stop();
  // The daemon's line for each load: where its time went (plan, read,
  // verify, deliver; summed over the reader threads).
  for (absl::StatusOr<std::string> line; (line = (*daemon)->ReadLine()).ok();) {
    if (line->find("ckptd: load job=") != std::string::npos) {
      absl::FPrintF(stderr, "ckpt-bench: %s\n", *line);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(work, ec);

  struct Check {
    const char* name;
    double value;
    double limit;
    bool at_most;
    // The fast path's ratios hold with room for two snapshots; a smaller
    // pool makes the save wait on the disk by design, so the lazy save
    // cannot hide it and the plain way is no longer 10x slower.
    bool fast_path_only = false;
  };
  // A checkpoint larger than the pool cannot finish its copy before the
  // part that does not fit has been written: the floor is the larger of
  // the memcpy and of writing that part at the disk's speed.
  const bool streaming = pool < 2 * bytes;
  f["stall_floor_s"] =
      std::max(f["memcpy_floor_s"], (double(bytes) - double(pool)) / (f["disk_write_gbps"] * 1e9));
  const Check checks[] = {
      {"stall_blocking / stall_floor", f["stall_blocking_s"] / f["stall_floor_s"], 1.25, true},
      {"stall_lazy / stall_blocking", f["stall_lazy_s"] / f["stall_blocking_s"], 0.1, true, true},
      {"persist_gbps / disk_write_gbps", f["persist_gbps"] / f["disk_write_gbps"], 0.9, false},
      // Medians over the same pairs, half of them with the load first: this
      // disk serves whichever comes first in a pair up to 3x faster, so a
      // per-pair ratio swings from 0.3 to 3 and says little.
      {"load_gbps / disk_read_gbps", f["load_gbps"] / f["disk_read_gbps"], streaming ? 0.85 : 0.9,
       false},
      {"sync_baseline / stall_blocking", f["sync_baseline_s"] / f["stall_blocking_s"], 10, false,
       true},
      {"daemon_heap_mib", f["daemon_heap_mib"], 128, true},
  };
  absl::PrintF(
      "ckpt-bench: %.2f GiB, %d ranks, %d ms compute, checkpoint every %d steps, dir %s%s\n",
      c.state_gib, c.ranks, c.compute_ms, c.every, c.dir,
      disk->direct ? "" : " (O_DIRECT refused: disk figures are buffered)");
  for (const auto& [k, v] : f) absl::PrintF("  %-20s %10.3f\n", k, v);
  for (const Check& ch : checks) {
    const bool pass = ch.at_most ? ch.value <= ch.limit : ch.value >= ch.limit;
    absl::PrintF("  %-32s %8.3f  (%s %.2f)  %s\n", ch.name, ch.value,
                 ch.at_most ? "<=" : ">=", ch.limit,
                 ch.fast_path_only && streaming ? "n/a: the pool holds less than two snapshots"
                 : pass                         ? "ok"
                                                : "MISSED");
  }
  if (c.json) {
    PrintJsonLine(
        absl::StrFormat("\"state_gib\":%.3f,\"ranks\":%d,\"load_ranks\":%d,"
                        "\"compute_ms\":%d,\"every\":%d,\"checkpoints\":%d,\"dir\":\"%s\"",
                        c.state_gib, c.ranks, c.ranks + 1, c.compute_ms, c.every, c.checkpoints,
                        c.dir),
        f);
  }
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) {
  CLI::App app{"ckpt-bench: what a checkpoint costs the trainer, against the floors"};
  ckpt::bench::Config c;
  ckpt::bench::WorkerOptions w;
  bool worker = false, load_worker = false, save_worker = false, gpu_worker = false;
  app.add_option("--dir", c.dir, "Storage directory: tmpfs, a local disk or a mount");
  app.add_option("--state-gib", c.state_gib, "GiB of model state in total")->capture_default_str();
  app.add_option("--ranks", c.ranks, "Rank processes")->capture_default_str();
  app.add_option("--compute-ms", c.compute_ms, "Compute time per training step")
      ->capture_default_str();
  app.add_option("--every", c.every, "Checkpoint every K steps")->capture_default_str();
  app.add_option("--checkpoints", c.checkpoints, "Checkpoints per measurement")
      ->capture_default_str();
  app.add_option("--writer-threads", c.writer_threads, "ckptd writer threads")
      ->capture_default_str();
  app.add_option("--reader-threads", c.reader_threads,
                 "ckptd reader threads (default: ckptd's, 2 or 4 on S3)");
  app.add_option("--writer-nice", c.writer_nice, "ckptd writer threads' nice value")
      ->capture_default_str();
  app.add_option("--batch-mib", c.batch_mib, "ckptd --batch_bytes in MiB")->capture_default_str();
  app.add_option("--copy-threads", c.copy_threads, "Copy threads per rank")->capture_default_str();
  app.add_option("--pool-gib", c.pool_gib, "ckptd's pool in GiB (default: room for two snapshots)");
  app.add_option("--ckptd", c.ckptd, "Path of ckptd (default: beside this build)");
  app.add_flag("--json", c.json, "Also print one JSON line");
  app.add_flag("--memory-tier", c.memory_tier,
               "Measure the memory tier instead: every-step save stall and restore from memory, "
               "each against the memcpy floor");
  app.add_flag("--gpu", c.gpu,
               "Measure the GPU path instead: saves of GPU tensors over CUDA IPC, blocking and "
               "lazy, and loads back into them, against the D2H and H2D floors (exit code 77, "
               "skipped, without a GPU)");
  app.add_flag("--codecs", c.codecs,
               "Measure the chunk codecs instead: compression ratios of a synthetic "
               "mixed-precision Adam state, whole and as deltas between steps, and codec speed "
               "on one core; then persisting it through ckptd raw and encoded (to --dir, "
               "default /var/tmp)");
  app.add_option("--codec-files", c.codec_files,
                 "With --codecs: measure these safetensors files (a step, then optionally the "
                 "next step for the deltas) instead of the synthetic state")
      ->expected(1, 2);
  app.add_flag("--s3", c.s3,
               "Measure ckptd on an S3 root instead: persist and load against boto3 and awscli "
               "moving the same bytes to the same server (Swift s3api started here, or "
               "--s3-endpoint with the AWS_* keys)");
  app.add_option("--s3-endpoint", c.s3_endpoint, "With --s3: an S3 server to use");
  app.add_option("--gpu-transfer", c.gpu_transfer,
                 "With --gpu: pull (ckptd copies over CUDA IPC) or push (the ranks copy)")
      ->check(CLI::IsMember({"pull", "push"}))
      ->capture_default_str();
  app.add_flag("--keep-host-settings", c.keep_host,
               "Run ckptd without the huge page setting ckptd.service makes");
  // Internal: the rank processes.
  app.add_flag("--worker", worker)->group("");
  app.add_flag("--load-worker", load_worker)->group("");
  app.add_flag("--save-worker", save_worker)->group("");
  app.add_flag("--gpu-worker", gpu_worker)->group("");
  app.add_flag("--gpu-push", w.gpu_push)->group("");
  app.add_option("--socket", w.socket)->group("");
  app.add_option("--rank", w.rank)->group("");
  app.add_option("--world", w.world)->group("");
  app.add_option("--state-bytes", w.state_bytes)->group("");
  CLI11_PARSE(app, argc, argv);
  if (worker) {
    w.load = load_worker;
    w.copy_threads = c.copy_threads;
    return gpu_worker ? ckpt::bench::RunGpuWorker(w) : ckpt::bench::RunWorker(w);
  }
  // The codecs' persist figures need a disk: /var/tmp's (not tmpfs) unless told.
  if (c.dir.empty() && ((c.codecs && c.codec_files.empty()) || c.s3)) c.dir = "/var/tmp";
  if (c.dir.empty() && !c.codecs) {
    std::fprintf(stderr, "ckpt-bench: --dir is required\n%s", app.help().c_str());
    return 2;
  }
  if (c.ranks < 1 || c.state_gib <= 0 || c.pool_gib < 0 || c.every < 1 || c.checkpoints < 1 ||
      c.compute_ms < 0) {
    std::fprintf(stderr,
                 "ckpt-bench: --ranks, --state-gib, --every, --checkpoints must be positive\n");
    return 2;
  }
  if (c.ckptd.empty()) {
    const auto self = std::filesystem::read_symlink("/proc/self/exe");
    c.ckptd = (self.parent_path() / "../../daemon/ckptd").lexically_normal().string();
    if (!std::filesystem::exists(c.ckptd)) c.ckptd = "ckptd";
  }
  ckpt::bench::ServiceHostSetup host(c.keep_host);
  if (c.gpu) return ckpt::bench::RunGpu(c);
  if (c.codecs) return ckpt::bench::RunCodecs(c);
  if (c.s3) return ckpt::bench::RunS3(c);
  return c.memory_tier ? ckpt::bench::RunMemoryTier(c) : ckpt::bench::Run(c);
}
