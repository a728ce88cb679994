// ckpt-plan-bench: how long global planning takes at cluster scale, on one
// core (docs/design.md §4.2; ByteCheckpoint reports 62 s for its first plan at
// 8,960 GPUs). No daemon, no I/O: the coordinator's planners on synthetic
// plans.
//
// The save layout: --ranks ranks, 8 per host, each holding one part of each
// of --shards-per-rank tensors; parts are replicated --replication times
// (data-parallel replicas, on different hosts). The load layout differs:
// half the ranks, each asking for two consecutive parts' rows of every
// tensor, so every request spans two stored shards.
//
// save_plan_s and plan_cache_s are what the coordinator spends once the
// last host's plan arrived (the barrier): plan_cache_s is the next step's
// save of the same layout through its plan cache (plan_cache.h): the first
// plan is made through the cache, then the step changes and the cache
// answers. Before the barrier, the coordinator digests each host's plan as
// it arrives (HostPlanKey: its layout's and the cache's key); host_key_s is
// that for all hosts of a step, one after the other, and host_key_max_s
// the slowest host's. Each node daemon sends its plan in the compact form
// (coordinator.proto); node_compact_s is that work on all nodes, one after
// the other, and node_compact_max_s the slowest node's (node_load_compact_*
// the same for the load's plans).
//
// Each phase runs --repeat times in one process; the figures are each
// phase's fastest round (the machines are shared and noisy, and a
// long-running coordinator plans with a heap that earlier plans warmed),
// and the first round's are printed beside them: a fresh process pays for
// the kernel zeroing every page it touches for the first time.
//
// Prints the figures and, with --json, one JSON object:
//   save_plan_s, plan_cache_s, load_plan_s, save_plan_cpu_s, load_plan_cpu_s
//   (the thread's CPU time: without what other tenants took of the core),
//   load_manifest_read_s and load_manifest_mib (the split manifest the
//   commit wrote, a compact root and its chunk tables, read from memory
//   into the columns the load plans from, checked as the catalog checks
//   it, and the columns' size),
//   load_spread_s (the load cut into the hosts' parts: who reads what),
//   load_parts_s, load_part_max_s (every host's part made, one after the
//   other, and the slowest one's: the coordinator makes each on its host's
//   call), load_part_reads (the chunk reads in all parts), host_key_s, host_key_max_s,
//   node_compact_s, node_compact_max_s, node_load_compact_s,
//   node_load_compact_max_s,
//   first_save_plan_s, first_plan_cache_s, first_load_manifest_read_s, first_load_plan_s,
//   repeat, ranks, shards_per_rank,
//   replication, unique_shards, hosts, cached_plan_bytes (the memory the
//   plan cache holds for the job: --plan_cache_mib must allow it),
//   huge_heap (glibc's malloc asked for transparent huge pages, as
//   deploy/ckptd.service runs ckptd; --no-huge-heap for glibc's default),
//   peak_rss_mib (the process's peak resident memory: the hosts' plans as
//   the coordinator receives them, the planners' scratch and the cache;
//   each round drops the hosts' save plans before its load, as the
//   coordinator holds them only until their save committed, and makes
//   them again for the next round); save_peak_rss_mib,
//   manifest_peak_rss_mib and load_peak_rss_mib: the peak while the save
//   was planned, committed (its manifest made from the plan and the hosts'
//   reports, a checksum per chunk, and split as the commit splits it:
//   coordinator/saved_manifest.h), and the load read, planned and spread
//   (each from what the phase before left resident).
//   The load plans from the manifest as the catalog reads it (the
//   commit's split files, read into columns), without the save's plan: a
//   job loads when it starts, and the cache keeps a plan only within
//   --plan_cache_mib (cached_plan_bytes is this one's size).
//
// --threads sets the threads the planners run on (0, the default:
// the cores it may run on, at most 8, as the coordinator plans;
// planning_threads in the JSON).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/coordinator/saved_manifest.h"
#include "daemon/planning/column_manifest_read.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/load_spread.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/parallel_for.h"
#include "daemon/planning/plan_cache.h"
#include "daemon/planning/plan_key.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/planner_memory.h"
#include "daemon/planning/save_planner.h"
#include "proto/lib/compact_plan.h"
#include "proto/lib/status_context.h"
#include "tools/bench/manifest_bench.h"

namespace {

constexpr int kRanksPerHost = 8;
constexpr int64_t kRowsPerPart = 4;
constexpr int64_t kColumns = 256;  // f32: a part is 4 KiB

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// glibc's malloc madvises its heap for transparent huge pages with this
// tunable (glibc 2.35+): the planners' out-of-order walks over hundreds of
// megabytes miss the TLB less.
constexpr const char* kHugeHeapTunable = "glibc.malloc.hugetlb=1";

bool HugeHeapTunableSet() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, kHugeHeapTunable) != nullptr;
}

void SetHugeHeapTunable() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string value = tunables == nullptr || *tunables == '\0'
                                ? std::string(kHugeHeapTunable)
                                : absl::StrCat(tunables, ":", kHugeHeapTunable);
  setenv("GLIBC_TUNABLES", value.c_str(), 1);
}

struct Layout {
  int ranks = 8192;
  int shards_per_rank = 1000;
  int replication = 8;
  int parts() const { return ranks / replication; }
};

std::string TensorName(int t) { return absl::StrCat("layers.", t / 10, ".w", t % 10); }

void SetRows(ckpt::v1::TensorShard* shard, int t, int64_t first_row, int64_t rows, int parts) {
  shard->set_fqn(TensorName(t));
  shard->set_dtype(ckpt::v1::FLOAT32);
  shard->add_global_shape(kRowsPerPart * parts);
  shard->add_global_shape(kColumns);
  ckpt::v1::Box* box = shard->mutable_region()->mutable_box();
  box->add_offsets(first_row);
  box->add_offsets(0);
  box->add_lengths(rows);
  box->add_lengths(kColumns);
}

// The hosts' plans as their node daemons send them: each rank's shards
// (its request) made compact (node_save_plan.h), which `compact` times:
// the nodes' share of the work, on their own hosts.
struct CompactTime {
  double all_s = 0;  // all hosts, one after the other
  double max_s = 0;  // the slowest host
};

std::vector<ckpt::v1::NodeSavePlan> SavePlans(const Layout& l, CompactTime& compact) {
  std::vector<ckpt::v1::NodeSavePlan> nodes((l.ranks + kRanksPerHost - 1) / kRanksPerHost);
  google::protobuf::RepeatedPtrField<ckpt::v1::TensorShard> request;
  for (size_t h = 0; h < nodes.size(); ++h) {
    nodes[h].mutable_host()->set_host(absl::StrFormat("host%05d", h));
    nodes[h].set_job("bench");
    nodes[h].set_step(1);
    nodes[h].set_world_size(l.ranks);
    nodes[h].set_writer_threads(4);
    ckpt::CompactShardsBuilder builder(nodes[h]);
    double host_s = 0;
    for (int r = static_cast<int>(h) * kRanksPerHost;
         r < std::min<int>(l.ranks, (static_cast<int>(h) + 1) * kRanksPerHost); ++r) {
      // Replica d of part p is rank d * parts + p: replicas on other hosts.
      const int part = r % l.parts();
      request.Clear();
      for (int t = 0; t < l.shards_per_rank; ++t) {
        SetRows(request.Add(), t, part * kRowsPerPart, kRowsPerPart, l.parts());
      }
      ckpt::v1::RankSavePlan* rank = nodes[h].add_ranks();
      rank->set_rank(r);
      const auto begin = std::chrono::steady_clock::now();
      builder.AddShards(request, *rank);
      host_s += Seconds(std::chrono::steady_clock::now() - begin);
    }
    compact.all_s += host_s;
    compact.max_s = std::max(compact.max_s, host_s);
  }
  return nodes;
}

std::vector<ckpt::v1::NodeLoadPlan> LoadPlans(const Layout& l, CompactTime& compact) {
  const int ranks = l.ranks / 2;
  const int parts = l.parts();
  std::vector<ckpt::v1::NodeLoadPlan> nodes((ranks + kRanksPerHost - 1) / kRanksPerHost);
  google::protobuf::RepeatedPtrField<ckpt::v1::TensorShard> request;
  // Each rank: two parts' rows, replicas spread over the ranks as on save.
  const int groups = parts / 2;
  for (size_t h = 0; h < nodes.size(); ++h) {
    nodes[h].mutable_host()->set_host(absl::StrFormat("host%05d", h));
    nodes[h].set_job("bench");
    nodes[h].set_step(1);
    ckpt::CompactShardsBuilder builder(nodes[h]);
    double host_s = 0;
    for (int r = static_cast<int>(h) * kRanksPerHost;
         r < std::min<int>(ranks, (static_cast<int>(h) + 1) * kRanksPerHost); ++r) {
      const int group = r % groups;
      request.Clear();
      for (int t = 0; t < l.shards_per_rank; ++t) {
        SetRows(request.Add(), t, group * 2 * kRowsPerPart, 2 * kRowsPerPart, parts);
      }
      auto* rank = nodes[h].add_ranks();
      rank->set_rank(r);
      const auto begin = std::chrono::steady_clock::now();
      builder.AddRequests(request, *rank);
      host_s += Seconds(std::chrono::steady_clock::now() - begin);
    }
    compact.all_s += host_s;
    compact.max_s = std::max(compact.max_s, host_s);
  }
  return nodes;
}

// The process's peak resident memory since the last call (VmHWM), in
// MiB; then starts the next phase's peak from what is resident now
// (clear_refs 5). 0 where /proc cannot say.
// The highest of every phase's peak: clear_refs resets what getrusage
// reports too.
double g_peak_mib = 0;

double TakePhasePeakMib() {
  double peak_mib = 0;
  if (FILE* status = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, status) != nullptr) {
      unsigned long long kib = 0;
      if (std::sscanf(line, "VmHWM: %llu kB", &kib) == 1) peak_mib = kib / 1024.0;
    }
    std::fclose(status);
  }
  g_peak_mib = std::max(g_peak_mib, peak_mib);
  if (FILE* reset = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", reset);
    std::fclose(reset);
  }
  return peak_mib;
}

// This thread's CPU time: what a phase cost on its core, without the time
// a shared machine gave the core to others (wall time counts both).
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Each host's report of its save, as its writers send it: a checksum per
// chunk written (a 0-byte item has none).
std::map<std::string, ckpt::v1::NodePersistReport> ReportsOf(const ckpt::v1::SaveAssignment& plan) {
  std::map<std::string, ckpt::v1::NodePersistReport> reports;
  const uint64_t chunk_bytes = plan.chunk_bytes();
  uint32_t crc = 0;
  for (const ckpt::v1::HostAssignment& host : plan.hosts()) {
    ckpt::v1::NodePersistReport& report = reports[host.host().host()];
    *report.mutable_host() = host.host();
    for (const ckpt::v1::WriteItem& item : host.items()) {
      const uint64_t step = item.is_object() ? std::max<uint64_t>(item.bytes(), 1) : chunk_bytes;
      for (uint64_t offset = 0; offset < item.bytes(); offset += step) {
        ckpt::v1::ChunkChecksum* sum = report.add_checksums();
        sum->set_file(host.files(item.writer()));
        sum->set_file_offset(item.file_offset() + offset);
        sum->set_crc32c(++crc);
      }
    }
  }
  return reports;
}

struct Figures {
  double save_plan_s = 0;
  double plan_cache_s = 0;
  double load_plan_s = 0;
  double manifest_read_s = 0;   // the split manifest read into columns, checked
  uint64_t manifest_bytes = 0;  // the columns' memory
  double load_spread_s = 0;     // who reads what, for the whole load
  double load_parts_s = 0;      // every host's part made, one after the other
  double load_part_max_s = 0;   // the slowest host's
  uint64_t part_reads = 0;      // in all hosts' parts
  double save_plan_cpu_s = 0;
  double load_plan_cpu_s = 0;
  double host_key_s = 0;         // every host's plan digested, one after the other
  double host_key_max_s = 0;     // the slowest host's
  uint64_t cached_bytes = 0;     // memory the cached plan takes (key and assignment)
  double save_peak_mib = 0;      // the process's peak while the save was planned
  double manifest_peak_mib = 0;  // ... while it was committed: its manifest made and split
  double load_peak_mib = 0;      // ... while the load was planned and spread
};

// One round: a save planned through an empty cache, the next step's from
// the cache, and the load of a different layout.
absl::StatusOr<Figures> Measure(std::vector<ckpt::v1::NodeSavePlan>& save_nodes,
                                const std::vector<ckpt::v1::NodeLoadPlan>& load_nodes,
                                const ckpt::planning::SavePlannerOptions& options,
                                const ckpt::RequestLimits& load_limits, uint64_t* items, int* reads,
                                ckpt::v1::CheckpointManifest* manifest_out) {
  Figures f;
  TakePhasePeakMib();
  for (ckpt::v1::NodeSavePlan& node : save_nodes) node.set_step(1);
  // As the plans arrive.
  std::vector<std::string> host_keys;
  for (const ckpt::v1::NodeSavePlan& node : save_nodes) {
    const auto arrived = std::chrono::steady_clock::now();
    host_keys.push_back(ckpt::planning::HostPlanKey(node));
    const double s = Seconds(std::chrono::steady_clock::now() - arrived);
    f.host_key_s += s;
    f.host_key_max_s = std::max(f.host_key_max_s, s);
  }
  auto cache = std::make_unique<ckpt::planning::SavePlanCache>(uint64_t{1} << 40);
  auto start = std::chrono::steady_clock::now();
  double cpu = ThreadCpuSeconds();
  absl::StatusOr<ckpt::planning::SavePlan> saved = cache->Plan(save_nodes, host_keys, options);
  f.save_plan_cpu_s = ThreadCpuSeconds() - cpu;
  f.save_plan_s = Seconds(std::chrono::steady_clock::now() - start);
  if (!saved.ok()) return ckpt::WithContext(saved.status(), "save plan");
  // The next step: its plans arrive and are digested again.
  for (ckpt::v1::NodeSavePlan& node : save_nodes) node.set_step(node.step() + 1);
  for (size_t h = 0; h < save_nodes.size(); ++h) {
    host_keys[h] = ckpt::planning::HostPlanKey(save_nodes[h]);
  }
  bool hit = false;
  start = std::chrono::steady_clock::now();
  absl::StatusOr<ckpt::planning::SavePlan> cached =
      cache->Plan(save_nodes, host_keys, options, &hit);
  f.plan_cache_s = Seconds(std::chrono::steady_clock::now() - start);
  if (!cached.ok()) return ckpt::WithContext(cached.status(), "the next step's plan");
  if (!hit) return absl::InternalError("the next step's plan did not come from the cache");
  // The save is done with its hosts' plans (the coordinator drops them
  // once it committed): the load does not hold them (the next round makes
  // them again).
  std::vector<ckpt::v1::NodeSavePlan>().swap(save_nodes);
  f.cached_bytes = cache->Stats().bytes;
  f.save_peak_mib = TakePhasePeakMib();
  *items = 0;
  for (const auto& host : saved->assignment->hosts()) *items += host.items_size();
  // The commit (coordinator/saved_manifest.h): the hosts' reports, a
  // checksum per chunk as their writers send them, and the manifest made
  // from the plan with them, split as it is made, while the cache still
  // holds the plan.
  std::optional<ckpt::coordinator::ManifestFiles> files;
  {
    const std::map<std::string, ckpt::v1::NodePersistReport> reports =
        ReportsOf(*saved->assignment);
    std::string joined;
    absl::StatusOr<ckpt::coordinator::ManifestFiles> made = ckpt::coordinator::SavedManifest(
        *saved, /*created_unix_ms=*/1, reports, {1, options.manifest_limits},
        manifest_out != nullptr ? &joined : nullptr);
    if (!made.ok()) return ckpt::WithContext(made.status(), "the commit's manifest");
    if (!made->tables.has_value()) return absl::InternalError("the manifest was not split");
    files = *std::move(made);
    if (manifest_out != nullptr && !manifest_out->ParseFromString(joined)) {
      return absl::InternalError("the committed manifest does not parse");
    }
  }
  // The load plans from the manifest as the catalog reads it: the split
  // files the commit wrote (a compact root and its chunk tables), read into
  // columns (column_manifest_read.h). It does not hold the save's plan
  // too: a job loads when it starts, and the cache holds a plan only
  // within its budget (--plan_cache_mib; cached_bytes says what this one
  // needs).
  saved = ckpt::planning::SavePlan();
  cached = ckpt::planning::SavePlan();
  cache.reset();
  f.manifest_peak_mib = TakePhasePeakMib();
  start = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<const ckpt::planning::ColumnManifest>> columns;
  {
    const std::string tables = *std::move(files->tables);
    files->tables.reset();
    ckpt::planning::ManifestFootprint footprint;
    absl::StatusOr<ckpt::v1::CheckpointManifest> root = ckpt::planning::DecodeBoundedManifest(
        files->manifest, "MANIFEST", options.manifest_limits, &footprint);
    if (!root.ok()) return root.status();
    columns = ckpt::planning::ReadColumnManifest(
        *std::move(root), footprint, files->manifest.size(), files->job, files->step, "MANIFEST",
        options.manifest_limits,
        [&](uint64_t offset, uint64_t length, uint64_t) -> absl::StatusOr<std::string> {
          return tables.substr(offset, length);
        });
  }
  files.reset();
  f.manifest_read_s = Seconds(std::chrono::steady_clock::now() - start);
  if (!columns.ok()) return ckpt::WithContext(columns.status(), "manifest read");
  f.manifest_bytes = (*columns)->MemoryBytes();
  start = std::chrono::steady_clock::now();
  cpu = ThreadCpuSeconds();
  absl::StatusOr<std::shared_ptr<ckpt::planning::GlobalLoad>> loaded =
      ckpt::planning::PlanGlobalLoad(*std::move(columns), load_nodes, load_limits, options.threads);
  f.load_plan_cpu_s = ThreadCpuSeconds() - cpu;
  f.load_plan_s = Seconds(std::chrono::steady_clock::now() - start);
  if (!loaded.ok()) return ckpt::WithContext(loaded.status(), "load plan");
  *reads = static_cast<int>((*loaded)->reads());
  {
    // The coordinator cuts the plan into the hosts' parts: who reads what
    // (load_spread.h) once, then each host's part as the host asks for it
    // (each host's call on a core of its own; here one after the other).
    std::map<int, std::string> rank_hosts;
    std::map<std::string, std::string> addresses;
    for (const ckpt::v1::NodeLoadPlan& node : load_nodes) {
      addresses[node.host().host()] = node.host().address();
      for (const auto& r : node.ranks()) rank_hosts.emplace(r.rank(), node.host().host());
    }
    start = std::chrono::steady_clock::now();
    const ckpt::planning::LoadSpread spread(std::move(*loaded), rank_hosts, addresses, 64u << 20, 1,
                                            std::string(16, 's'), nullptr, options.threads);
    f.load_spread_s = Seconds(std::chrono::steady_clock::now() - start);
    for (const std::string& host : spread.hosts()) {
      const auto made = std::chrono::steady_clock::now();
      std::optional<ckpt::v1::LoadAssignment> part = spread.Part(host);
      const double s = Seconds(std::chrono::steady_clock::now() - made);
      f.load_parts_s += s;
      f.load_part_max_s = std::max(f.load_part_max_s, s);
      f.part_reads += static_cast<uint64_t>(part->reads_size());
    }
  }
  f.load_peak_mib = TakePhasePeakMib();
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckpt-plan-bench: global save and load planning at cluster scale, on one core"};
  Layout l;
  bool json = false;
  int repeat = 3;
  app.add_option("--ranks", l.ranks, "ranks saving (8 per host)")->capture_default_str();
  app.add_option("--shards-per-rank", l.shards_per_rank, "tensor shards each rank holds")
      ->capture_default_str();
  app.add_option("--replication", l.replication, "replicas of each shard (data parallel)")
      ->capture_default_str();
  app.add_option("--repeat", repeat,
                 "rounds in one process; the figures are each phase's fastest (this machine is "
                 "shared and noisy), the first round's are printed too")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_flag("--json", json, "print the figures as one JSON object");
  int threads = 0;
  app.add_option(
         "--threads", threads,
         "threads the planners run on (0: the cores this process may run on, at most 8, as the "
         "coordinator plans)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  std::string manifest_dir;
  app.add_option("--manifest-dir", manifest_dir,
                 "also commit the planned manifest in each format (one MANIFEST; a root and "
                 "chunk tables) into a fresh folder here, fsynced, and read it back as the "
                 "catalog does (after peak_rss_mib is taken; the folder is removed)");
  bool manifest_split_only = false;
  app.add_flag("--manifest-split-only", manifest_split_only,
               "with --manifest-dir, commit and read the split manifest only (not one MANIFEST: "
               "at 131,072 ranks that file is most of a gigabyte, and its read as much memory "
               "again as the plans)");
  bool huge_heap = true;
  app.add_flag("--huge-heap,!--no-huge-heap", huge_heap,
               "run with glibc's malloc asking for transparent huge pages "
               "(GLIBC_TUNABLES=glibc.malloc.hugetlb=1, as deploy/ckptd.service runs ckptd); "
               "re-executes itself to set it")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (huge_heap && !HugeHeapTunableSet()) {
    // Tunables are read at startup only: the bench runs again with it.
    SetHugeHeapTunable();
    execv("/proc/self/exe", argv);
    const int error = errno;
    std::fprintf(stderr, "ckpt-plan-bench: re-executing with %s: %s (running without)\n",
                 kHugeHeapTunable, ckpt::ErrnoMessage(error).c_str());
    huge_heap = false;
  }
  // As ckptd does: a plan's freed memory is kept for the next one.
  ckpt::planning::KeepFreedMemoryForReuse();
  if (l.ranks <= 0 || l.shards_per_rank <= 0 || l.replication <= 0 ||
      l.ranks % (2 * l.replication) != 0) {
    std::fprintf(stderr,
                 "ckpt-plan-bench: --ranks must be a positive multiple of 2 x --replication\n");
    return 2;
  }

  ckpt::planning::SavePlannerOptions options;
  options.threads = threads;
  // Cluster-scale bounds: the daemon's per-rank defaults stay, the
  // per-save ones grow with the job.
  options.limits.max_world_size = l.ranks;
  options.limits.max_chunks_per_save = int64_t{1} << 30;
  options.manifest_limits.max_shards = int64_t{1} << 30;
  options.manifest_limits.max_chunks = int64_t{1} << 30;
  options.manifest_limits.max_tensors = int64_t{1} << 30;
  options.manifest_limits.max_manifest_bytes = uint64_t{1} << 40;
  // As an operator of a job this size sets --max_manifest_memory_bytes:
  // 8192 ranks' manifest takes ~640 MiB parsed, past the 256 MiB default.
  options.manifest_limits.max_memory_bytes = uint64_t{1} << 40;

  CompactTime compact;
  std::vector<ckpt::v1::NodeSavePlan> save_nodes = SavePlans(l, compact);
  const size_t hosts = save_nodes.size();
  CompactTime load_compact;
  const std::vector<ckpt::v1::NodeLoadPlan> load_nodes = LoadPlans(l, load_compact);
  ckpt::RequestLimits load_limits = options.limits;
  Figures best;
  Figures first;
  uint64_t items = 0;
  int reads = 0;
  // The last round's manifest, for --manifest-dir: a round holds its own
  // plans only (the coordinator one job's cached plan), not the last
  // round's too.
  ckpt::v1::CheckpointManifest last_manifest;
  for (int round = 0; round < repeat; ++round) {
    if (save_nodes.empty()) {
      CompactTime again;  // timed once, in the first round's
      save_nodes = SavePlans(l, again);
    }
    absl::StatusOr<Figures> figures =
        Measure(save_nodes, load_nodes, options, load_limits, &items, &reads,
                manifest_dir.empty() || round + 1 < repeat ? nullptr : &last_manifest);
    if (!figures.ok()) {
      std::fprintf(stderr, "ckpt-plan-bench: %s\n", figures.status().ToString().c_str());
      return 1;
    }
    if (round == 0) first = best = *figures;
    best.save_plan_s = std::min(best.save_plan_s, figures->save_plan_s);
    best.plan_cache_s = std::min(best.plan_cache_s, figures->plan_cache_s);
    best.load_plan_s = std::min(best.load_plan_s, figures->load_plan_s);
    best.manifest_read_s = std::min(best.manifest_read_s, figures->manifest_read_s);
    best.load_spread_s = std::min(best.load_spread_s, figures->load_spread_s);
    best.load_parts_s = std::min(best.load_parts_s, figures->load_parts_s);
    best.load_part_max_s = std::min(best.load_part_max_s, figures->load_part_max_s);
    best.save_plan_cpu_s = std::min(best.save_plan_cpu_s, figures->save_plan_cpu_s);
    best.load_plan_cpu_s = std::min(best.load_plan_cpu_s, figures->load_plan_cpu_s);
    best.host_key_s = std::min(best.host_key_s, figures->host_key_s);
    best.host_key_max_s = std::min(best.host_key_max_s, figures->host_key_max_s);
    best.save_peak_mib = std::max(best.save_peak_mib, figures->save_peak_mib);
    best.manifest_peak_mib = std::max(best.manifest_peak_mib, figures->manifest_peak_mib);
    best.load_peak_mib = std::max(best.load_peak_mib, figures->load_peak_mib);
  }
  const double save_plan_s = best.save_plan_s;
  const double plan_cache_s = best.plan_cache_s;
  const double load_plan_s = best.load_plan_s;

  std::printf(
      "save plan: %d ranks x %d shards, replication %d: %llu unique shards on %zu hosts in %.3f "
      "s\n",
      l.ranks, l.shards_per_rank, l.replication, static_cast<unsigned long long>(items), hosts,
      save_plan_s);
  std::printf(
      "save plan of the next step, from the plan cache: %.3f s (the cached plan: %.1f MiB)\n",
      plan_cache_s, first.cached_bytes / 1048576.0);
  std::printf(
      "load: the split manifest read into columns and checked in %.3f s (%.1f MiB); the plan "
      "for %d ranks, %d chunk reads: %.3f s\n",
      best.manifest_read_s, first.manifest_bytes / 1048576.0, l.ranks / 2, reads, load_plan_s);
  std::printf(
      "load spread over the hosts: who reads what %.3f s; the hosts' parts (%llu chunk reads, "
      "a chunk in the part of every host that needs it) made as each host asks: %.3f s for all, "
      "%.4f s the slowest\n",
      best.load_spread_s, static_cast<unsigned long long>(first.part_reads), best.load_parts_s,
      best.load_part_max_s);
  std::printf("heap: %s\n", huge_heap ? "transparent huge pages (glibc.malloc.hugetlb=1, as "
                                        "deploy/ckptd.service runs ckptd)"
                                      : "glibc's default (4 KiB pages; --no-huge-heap)");
  std::printf(
      "on-CPU time of this thread (without what others took of the core): save %.3f s, "
      "load %.3f s\n",
      best.save_plan_cpu_s, best.load_plan_cpu_s);
  std::printf(
      "before the barrier, each host's plan digested as it arrives: %.3f s for all %zu hosts, "
      "%.4f s the slowest\n",
      best.host_key_s, hosts, best.host_key_max_s);
  std::printf(
      "on the nodes, each host's plan made compact before it is sent: save %.3f s for all "
      "hosts, %.4f s the slowest; load %.3f s for all hosts, %.4f s the slowest\n",
      compact.all_s, compact.max_s, load_compact.all_s, load_compact.max_s);
  std::printf(
      "first round (a fresh process's heap): save %.3f s, cache %.3f s, load: manifest read "
      "%.3f s, plan %.3f s\n",
      first.save_plan_s, first.plan_cache_s, first.manifest_read_s, first.load_plan_s);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  TakePhasePeakMib();
  const double peak_rss_mib =
      std::max(g_peak_mib, static_cast<double>(usage.ru_maxrss) / 1024.0);  // KiB on Linux
  std::printf(
      "peak resident memory of this process: %.0f MiB (while the save was planned: %.0f MiB; "
      "its manifest made from the reports and split: %.0f MiB; the load planned and spread: "
      "%.0f MiB)\n",
      peak_rss_mib, best.save_peak_mib, best.manifest_peak_mib, best.load_peak_mib);
  ckpt::bench::ManifestFigures manifest;
  if (!manifest_dir.empty()) {
    absl::StatusOr<ckpt::bench::ManifestFigures> measured =
        ckpt::bench::MeasureManifestFormats(std::move(last_manifest), manifest_dir, "host00000",
                                            options.manifest_limits, manifest_split_only);
    if (!measured.ok()) {
      std::fprintf(stderr, "ckpt-plan-bench: manifest: %s\n", measured.status().ToString().c_str());
      return 1;
    }
    manifest = *measured;
    if (manifest_split_only) {
      std::printf("manifest, one file: not measured (--manifest-split-only)\n");
    } else {
      std::printf("manifest, one file: %.1f MiB, committed in %.3f s, read in %.3f s\n",
                  manifest.whole_bytes / 1048576.0, manifest.whole_commit_s, manifest.whole_read_s);
    }
    std::printf(
        "manifest split (root format %u): root %.1f MiB and %d chunk tables of %.1f MiB, "
        "committed in %.3f s, read in %.3f s; one host's part (the root and its own tables) "
        "read in %.3f s\n",
        manifest.root_format, manifest.root_bytes / 1048576.0, manifest.tables,
        manifest.table_bytes / 1048576.0, manifest.split_commit_s, manifest.split_read_s,
        manifest.host_read_s);
  }
  if (json) {
    std::printf(
        "{\"save_plan_s\":%.4f,\"plan_cache_s\":%.4f,\"load_plan_s\":%.4f,"
        "\"load_manifest_read_s\":%.4f,\"load_manifest_mib\":%.1f,"
        "\"save_plan_cpu_s\":%.4f,\"load_plan_cpu_s\":%.4f,"
        "\"load_spread_s\":%.4f,\"load_parts_s\":%.4f,\"load_part_max_s\":%.5f,"
        "\"load_part_reads\":%llu,"
        "\"host_key_s\":%.4f,\"host_key_max_s\":%.5f,\"node_compact_s\":%.4f,"
        "\"node_compact_max_s\":%.5f,\"node_load_compact_s\":%.4f,"
        "\"node_load_compact_max_s\":%.5f,\"first_save_plan_s\":%.4f,\"first_plan_cache_"
        "s\":%.4f,\"first_load_manifest_read_s\":%.4f,\"first_load_plan_s\":%.4f,"
        "\"repeat\":%d,\"ranks\":%d,\"shards_per_rank\":%d,\"replication\":%d,"
        "\"unique_shards\":%llu,\"hosts\":%zu,\"cached_plan_bytes\":%llu,\"huge_heap\":%s,"
        "\"peak_rss_mib\":%.0f,\"save_peak_rss_mib\":%.0f,\"manifest_peak_rss_mib\":%.0f,"
        "\"load_peak_rss_mib\":%.0f,"
        "\"planning_threads\":%d",
        save_plan_s, plan_cache_s, load_plan_s, best.manifest_read_s,
        first.manifest_bytes / 1048576.0, best.save_plan_cpu_s, best.load_plan_cpu_s,
        best.load_spread_s, best.load_parts_s, best.load_part_max_s,
        static_cast<unsigned long long>(first.part_reads), best.host_key_s, best.host_key_max_s,
        compact.all_s, compact.max_s, load_compact.all_s, load_compact.max_s, first.save_plan_s,
        first.plan_cache_s, first.manifest_read_s, first.load_plan_s, repeat, l.ranks,
        l.shards_per_rank, l.replication, static_cast<unsigned long long>(items), hosts,
        static_cast<unsigned long long>(first.cached_bytes), huge_heap ? "true" : "false",
        peak_rss_mib, best.save_peak_mib, best.manifest_peak_mib, best.load_peak_mib,
        ckpt::planning::PlanningThreads(threads));
    if (!manifest_dir.empty()) {
      std::printf(
          ",\"manifest_whole_bytes\":%llu,\"manifest_whole_commit_s\":%.4f,"
          "\"manifest_whole_read_s\":%.4f,\"manifest_root_format\":%u,"
          "\"manifest_root_bytes\":%llu,"
          "\"manifest_table_bytes\":%llu,\"manifest_tables\":%d,\"manifest_split_commit_s\":%.4f,"
          "\"manifest_split_read_s\":%.4f,\"manifest_host_read_s\":%.4f",
          static_cast<unsigned long long>(manifest.whole_bytes), manifest.whole_commit_s,
          manifest.whole_read_s, manifest.root_format,
          static_cast<unsigned long long>(manifest.root_bytes),
          static_cast<unsigned long long>(manifest.table_bytes), manifest.tables,
          manifest.split_commit_s, manifest.split_read_s, manifest.host_read_s);
    }
    std::printf("}\n");
  }
  return 0;
}
