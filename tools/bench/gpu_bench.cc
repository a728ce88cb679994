#include "tools/bench/gpu_bench.h"

#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gpu/device_factory.h"
#include "proto/lib/hex.h"
#include "tools/bench/median.h"

namespace ckpt::bench {
namespace {

// The daemon's default chunk (daemon_options.h), which its pulls copy by.
constexpr uint64_t kPullChunkBytes = 4 << 20;

// One tensor a rank exported: "<handle-hex>:<offset>:<allocation>:<device>:<bytes>".
struct Exported {
  std::string handle;
  uint64_t offset = 0, allocation = 0, bytes = 0;
  int device = 0;
};

absl::StatusOr<std::vector<Exported>> ParseExports(const std::string& line) {
  if (line.rfind("ok ", 0) != 0) return absl::InternalError("export: " + line);
  std::vector<Exported> out;
  for (absl::string_view token : absl::StrSplit(line.substr(3), ' ', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(token, ':');
    Exported e;
    std::optional<std::string> handle = f.empty() ? std::nullopt : DecodeHex(f[0]);
    if (handle) e.handle = *handle;
    if (f.size() != 5 || !handle || !absl::SimpleAtoi(f[1], &e.offset) ||
        !absl::SimpleAtoi(f[2], &e.allocation) || !absl::SimpleAtoi(f[3], &e.device) ||
        !absl::SimpleAtoi(f[4], &e.bytes)) {
      return absl::InternalError(absl::StrCat("export: malformed ", token));
    }
    out.push_back(std::move(e));
  }
  return out;
}

// Registered (pinned) host memory, as the daemon's pool is.
class PinnedBuffer {
 public:
  PinnedBuffer(gpu::DeviceRuntime& runtime, uint64_t bytes) : runtime_(runtime), bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      status_ = absl::ResourceExhaustedError(absl::StrCat("mmap of ", bytes, " bytes"));
      return;
    }
    data_ = static_cast<char*>(p);
    status_ = runtime_.RegisterHostMemory(data_, bytes_);
    registered_ = status_.ok();
  }
  ~PinnedBuffer() {
    if (registered_) (void)runtime_.UnregisterHostMemory(data_);
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  const absl::Status& status() const { return status_; }
  char* data() const { return data_; }

 private:
  gpu::DeviceRuntime& runtime_;
  const uint64_t bytes_;
  char* data_ = nullptr;
  bool registered_ = false;
  absl::Status status_;
};

// The daemon's pull path alone: every rank's tensors mapped over IPC and
// copied by the daemon's CUDA runtime into registered memory, a thread per
// rank as the daemon serves ranks; seconds for all of them.
absl::StatusOr<double> PullAlone(gpu::DeviceRuntime& runtime,
                                 std::vector<std::unique_ptr<ChildProcess>>& workers,
                                 uint64_t bytes, const PinnedBuffer& into) {
  struct Pull {
    std::unique_ptr<gpu::IpcMapping> mapping;
    uint64_t offset = 0, bytes = 0;
    char* destination = nullptr;
  };
  std::vector<std::vector<Pull>> by_rank(workers.size());
  uint64_t at = 0;
  for (size_t r = 0; r < workers.size(); ++r) {
    if (absl::Status s = workers[r]->Send("export"); !s.ok()) return s;
    absl::StatusOr<std::string> line = workers[r]->ReadLine();
    if (!line.ok()) return line.status();
    absl::StatusOr<std::vector<Exported>> exports = ParseExports(*line);
    if (!exports.ok()) return exports.status();
    for (const Exported& e : *exports) {
      auto mapping = runtime.OpenIpcHandle(e.handle, e.device, e.allocation);
      if (!mapping.ok()) return mapping.status();
      if (at + e.bytes > bytes + (64 << 20)) return absl::InternalError("exports exceed the state");
      by_rank[r].push_back({std::move(*mapping), e.offset, e.bytes, into.data() + at});
      at += e.bytes;
    }
  }
  std::vector<absl::Status> results(workers.size());
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> threads;
    for (size_t r = 0; r < by_rank.size(); ++r) {
      threads.emplace_back([&, r] {
        for (const Pull& p : by_rank[r]) {
          const char* src = static_cast<const char*>(p.mapping->device_ptr()) + p.offset;
          results[r].Update(runtime.CopyDeviceToHost(src, p.destination, p.bytes, kPullChunkBytes,
                                                     [](uint64_t, uint64_t) {}));
        }
      });
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return seconds;
}

}  // namespace

int RunGpu(const Config& c) {
  std::unique_ptr<gpu::DeviceRuntime> runtime = gpu::DetectDeviceRuntime();
  if (!runtime->HasDevice()) {
    absl::PrintF("ckpt-bench --gpu: skipped: %s\n", runtime->Describe());
    if (c.json) {
      std::string why = runtime->Describe();
      for (char& ch : why) {
        if (ch == '"' || ch == '\\') ch = '\'';
      }
      absl::PrintF("{\"mode\":\"gpu\",\"skipped\":true,\"reason\":\"%s\"}\n", why);
    }
    return kSkipped;
  }
  absl::FPrintF(stderr, "ckpt-bench: %s\n", runtime->Describe());
  const Workspace ws(c);
  const uint64_t bytes = ws.bytes;
  auto fail = [&](const absl::Status& s) { return ws.Fail(s); };
  std::map<std::string, double> f;
  const uint64_t pool = PoolBytes(c, bytes);
  // The newest step and the one being written, with room for padding.
  const uint64_t tier = 2 * bytes + (256ull << 20);
  f["pool_gib"] = pool / double(1ull << 30);
  auto daemon =
      StartDaemon(c, ws.work, ws.socket, pool, {absl::StrCat("--memory_tier_bytes=", tier)});
  if (!daemon.ok()) return fail(daemon.status());
  std::vector<std::string> role = {"--gpu-worker"};
  if (c.gpu_transfer == "push") role.push_back("--gpu-push");
  auto workers = StartWorkers(c, ws.socket, c.ranks, bytes, role);
  if (!workers.ok()) return fail(workers.status());
  std::string name = "unknown";
  if ((*workers)[0]->Send("name").ok()) {
    absl::StatusOr<std::string> line = (*workers)[0]->ReadLine();
    if (line.ok() && line->rfind("name ", 0) == 0) name = line->substr(5);
  }
  absl::FPrintF(stderr, "ckpt-bench: %d ranks hold %.2f GiB on %s; %d blocking saves...\n", c.ranks,
                bytes / double(1 << 30), name, c.checkpoints);

  // Each save right after its floor, so both see the same machine.
  std::vector<double> d2h, stalls, snapshots;
  int64_t last_step = 0;
  for (int k = 0; k < c.checkpoints; ++k) {
    auto floor = Broadcast(*workers, "floor d2h");
    if (!floor.ok()) return fail(floor.status());
    last_step = 100 + k;
    auto save = Broadcast(*workers, absl::StrCat("blocking ", last_step, " memory"));
    if (!save.ok()) return fail(save.status());
    d2h.push_back(bytes / MaxOver(*floor, 0) / 1e9);
    stalls.push_back(MaxOver(*save, 0));
    snapshots.push_back(bytes / stalls.back() / 1e9);
    absl::FPrintF(stderr, "ckpt-bench: save %d: D2H floor %.2f GB/s, snapshot %.2f GB/s (%.3f s)\n",
                  k, d2h.back(), snapshots.back(), stalls.back());
  }
  f["gpu_d2h_floor_gbps"] = Median(d2h);
  f["gpu_stall_blocking_s"] = Median(stalls);
  f["gpu_snapshot_gbps"] = Median(snapshots);

  absl::FPrintF(stderr, "ckpt-bench: training loop, %d ms compute, a lazy save every %d steps...\n",
                c.compute_ms, c.every);
  auto lazy = Broadcast(*workers, absl::StrCat("lazy 1000 ", c.checkpoints, " ", c.every, " ",
                                               c.compute_ms, " memory"));
  if (!lazy.ok()) return fail(lazy.status());
  std::vector<double> lazy_stalls;
  for (int k = 0; k < c.checkpoints; ++k) lazy_stalls.push_back(MaxOver(*lazy, k));
  f["gpu_stall_lazy_s"] = Median(lazy_stalls);
  last_step = 1000 + int64_t{c.checkpoints - 1} * c.every;

  std::vector<double> h2d, loads;
  for (int k = 0; k < c.checkpoints; ++k) {
    auto floor = Broadcast(*workers, "floor h2d");
    if (!floor.ok()) return fail(floor.status());
    auto load = Broadcast(*workers, absl::StrCat("load ", last_step, " memory"));
    if (!load.ok()) return fail(load.status());
    h2d.push_back(bytes / MaxOver(*floor, 0) / 1e9);
    loads.push_back(bytes / MaxOver(*load, 0) / 1e9);
    absl::FPrintF(stderr, "ckpt-bench: load %d: H2D floor %.2f GB/s, load %.2f GB/s\n", k,
                  h2d.back(), loads.back());
  }
  f["gpu_h2d_floor_gbps"] = Median(h2d);
  f["gpu_load_gbps"] = Median(loads);

  std::vector<double> pulls;
  const PinnedBuffer into(*runtime, bytes + (64 << 20));
  if (!into.status().ok()) return fail(into.status());
  for (int k = 0; k < c.checkpoints; ++k) {
    absl::StatusOr<double> pull = PullAlone(*runtime, *workers, bytes, into);
    if (!pull.ok()) return fail(pull.status());
    pulls.push_back(bytes / *pull / 1e9);
  }
  f["gpu_pull_gbps"] = Median(pulls);
  for (auto& w : *workers) (void)w->Send("quit");
  workers->clear();
  (*daemon)->Stop();
  // The daemon's line for each load: where its time went (plan, read,
  // verify, deliver; summed over the reader threads).
  for (absl::StatusOr<std::string> line; (line = (*daemon)->ReadLine()).ok();) {
    if (line->find("ckptd: load job=") != std::string::npos) {
      absl::FPrintF(stderr, "ckpt-bench: %s\n", *line);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(ws.work, ec);

  f["gpu_snapshot_over_d2h"] = f["gpu_snapshot_gbps"] / f["gpu_d2h_floor_gbps"];
  f["gpu_load_over_h2d"] = f["gpu_load_gbps"] / f["gpu_h2d_floor_gbps"];
  f["gpu_pull_over_d2h"] = f["gpu_pull_gbps"] / f["gpu_d2h_floor_gbps"];
  f["gpu_lazy_over_blocking"] = f["gpu_stall_lazy_s"] / f["gpu_stall_blocking_s"];
  const std::vector<Goal> goals = {
      {"gpu_snapshot / gpu_d2h_floor", f["gpu_snapshot_over_d2h"], 0.8, false},
      {"gpu_load / gpu_h2d_floor", f["gpu_load_over_h2d"], 0.8, false},
      {"gpu_stall_lazy / gpu_stall_blocking", f["gpu_lazy_over_blocking"], 0.1, true},
  };
  absl::PrintF(
      "ckpt-bench --gpu: %.2f GiB, %d ranks on one %s, %d ms compute, %s, %d reader threads\n",
      c.state_gib, c.ranks, name, c.compute_ms, c.gpu_transfer, ReaderThreads(c));
  PrintFigures(f);
  PrintGoals(goals);
  if (c.json) {
    PrintJsonLine(
        absl::StrFormat("\"mode\":\"gpu\",\"state_gib\":%.3f,\"ranks\":%d,"
                        "\"gpu_name\":\"%s\",\"gpu_transfer\":\"%s\",\"reader_threads\":%d",
                        c.state_gib, c.ranks, name, c.gpu_transfer, ReaderThreads(c)),
        f);
  }
  return 0;
}

}  // namespace ckpt::bench
