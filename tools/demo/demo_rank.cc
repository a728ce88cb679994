// ckpt-demo-rank: one training rank of the demonstration and of the
// integration tests. Saves its shards of the demo model (tools/demo/
// model_layout.h) through ckptd, or loads them back under another sharding
// and checks every byte. Prints one line of timings; exits non-zero on any
// error or mismatch.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "ckpt/client.h"
#include "tools/demo/model_layout.h"
#include "tools/demo/parallel_layout.h"
#include "tools/demo/tensor_pattern.h"

ABSL_FLAG(std::string, socket, "", "ckptd's Unix socket");
ABSL_FLAG(std::string, job, "demo", "Job name");
ABSL_FLAG(int32_t, rank, 0, "This rank");
ABSL_FLAG(int32_t, world, 1, "Ranks in the job");
ABSL_FLAG(int32_t, local_world, 0,
          "Ranks of the job attached to this rank's ckptd (0: all; fewer: the job spans hosts)");
ABSL_FLAG(int32_t, local_rank, -1, "This rank's index on its host (-1: its rank)");
ABSL_FLAG(std::string, mode, "save", "save, load, or attach (attach and hang: liveness tests)");
ABSL_FLAG(int64_t, step, 1, "Step to save, or to load (-1: latest)");
ABSL_FLAG(int32_t, scale, 1, "Model size multiplier (1: ~1.4 MiB)");
ABSL_FLAG(bool, linger, false,
          "save: once saved, stay attached until killed (a trainer that goes on, then crashes)");
ABSL_FLAG(std::string, tier, "durable", "save: durable, memory, or both (memory, then durable)");
ABSL_FLAG(int32_t, steps, 1, "save: steps to save, from --step on, one after the other");
ABSL_FLAG(int32_t, durable_every, 0,
          "save: the every-K-steps policy (ckpt::TierForStep): every step to memory, every K-th "
          "to memory and durable storage; 0: --tier for every step");
ABSL_FLAG(bool, compressible, false,
          "tensors hold a pattern the chunk codecs can shrink (save and load must agree)");
ABSL_FLAG(std::string, from, "any", "load: any (the fastest tier), memory or durable");
ABSL_FLAG(int32_t, saved_world, 0, "load: ranks that saved (to know which rng objects exist)");
ABSL_FLAG(std::string, layout, "demo",
          "demo (tools/demo/model_layout.h) or parallel (tools/demo/parallel_layout.h)");
ABSL_FLAG(int32_t, tp, 1, "parallel layout: tensor-parallel degree");
ABSL_FLAG(int32_t, pp, 1, "parallel layout: pipeline stages (data-parallel: the rest)");
ABSL_FLAG(std::string, go_file, "",
          "save, load: once attached, wait until this file exists before the first request "
          "(fault tests choose the moment)");

namespace {

using ckpt::HostTensor;

int Fail(const std::string& what, const absl::Status& status) {
  absl::FPrintF(stderr, "rank %d: %s: %s\n", absl::GetFlag(FLAGS_rank), what, status.ToString());
  return 1;
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ckpt::testing::UseCompressiblePattern(absl::GetFlag(FLAGS_compressible));
  const int rank = absl::GetFlag(FLAGS_rank);
  const int world = absl::GetFlag(FLAGS_world);
  const int scale = absl::GetFlag(FLAGS_scale);
  const std::string mode = absl::GetFlag(FLAGS_mode);

  ckpt::ClientOptions options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  options.job = absl::GetFlag(FLAGS_job);
  options.rank = rank;
  options.world_size = world;
  options.local_rank = absl::GetFlag(FLAGS_local_rank) < 0 ? rank : absl::GetFlag(FLAGS_local_rank);
  options.local_world_size = absl::GetFlag(FLAGS_local_world);
  absl::StatusOr<std::unique_ptr<ckpt::Client>> client = ckpt::Client::Attach(options);
  if (!client.ok()) return Fail("attach", client.status());
  if (mode == "attach") {
    // For liveness tests: a rank that attached and then hangs until killed.
    std::printf("rank %d attached\n", rank);
    std::fflush(stdout);
    for (;;) pause();
  }

  if (const std::string go = absl::GetFlag(FLAGS_go_file); !go.empty()) {
    std::printf("rank %d attached, waiting for %s\n", rank, go.c_str());
    std::fflush(stdout);
    while (access(go.c_str(), F_OK) != 0) absl::SleepFor(absl::Milliseconds(10));
  }

  std::vector<HostTensor> tensors;
  if (absl::GetFlag(FLAGS_layout) == "parallel") {
    ckpt::testing::Parallelism parallel{absl::GetFlag(FLAGS_tp), absl::GetFlag(FLAGS_pp), 1};
    if (parallel.tp <= 0 || parallel.pp <= 0 || world % (parallel.tp * parallel.pp) != 0) {
      return Fail("layout", absl::InvalidArgumentError("world is not a multiple of --tp x --pp"));
    }
    parallel.dp = world / (parallel.tp * parallel.pp);
    tensors = ckpt::testing::ParallelLayout(rank, parallel, scale);
  } else {
    tensors = mode == "save" ? ckpt::testing::SaveLayout(rank, world, scale)
                             : ckpt::testing::LoadLayout(rank, world, scale);
  }
  std::vector<std::vector<char>> buffers;
  int64_t bytes = 0;
  for (HostTensor& t : tensors) {
    absl::StatusOr<std::vector<char>> data = ckpt::testing::PatternShard(t);
    if (!data.ok()) return Fail("layout", data.status());
    if (mode != "save") std::memset(data->data(), 0x5a, data->size());  // must be overwritten
    buffers.push_back(std::move(*data));
    t.data = buffers.back().data();
    bytes += static_cast<int64_t>(buffers.back().size());
  }

  if (mode == "save") {
    ckpt::SaveOptions save;
    const std::string tier = absl::GetFlag(FLAGS_tier);
    if (tier == "memory") {
      save.tier = ckpt::Tier::kMemory;
    } else if (tier == "both") {
      save.tier = ckpt::Tier::kMemoryAndDurable;
    } else if (tier != "durable") {
      return Fail("flags", absl::InvalidArgumentError("--tier is durable, memory or both"));
    }
    const int64_t first = absl::GetFlag(FLAGS_step);
    const int64_t every = absl::GetFlag(FLAGS_durable_every);
    for (int64_t step = first; step < first + absl::GetFlag(FLAGS_steps); ++step) {
      if (every > 0) save.tier = ckpt::TierForStep(step, every);
      const absl::Time start = absl::Now();
      absl::StatusOr<std::shared_ptr<ckpt::SaveHandle>> handle =
          (*client)->Save(step, tensors, ckpt::testing::SaveObjects(rank), save);
      if (!handle.ok()) return Fail("save", handle.status());
      if (absl::Status s = (*handle)->WaitSnapshot(); !s.ok()) return Fail("snapshot", s);
      const absl::Duration snapshot = absl::Now() - start;
      if (absl::Status s = (*handle)->WaitPersisted(); !s.ok()) return Fail("persist", s);
      const absl::Duration persisted = absl::Now() - start;
      absl::PrintF("rank %d saved step %d: %.1f MiB held, snapshot %.1f ms, committed %.1f ms\n",
                   rank, (*handle)->step(), bytes / 1048576.0, Ms(snapshot), Ms(persisted));
    }
    if (absl::GetFlag(FLAGS_linger)) {
      std::fflush(stdout);
      for (;;) pause();
    }
    return 0;
  }

  std::string dataloader, rng;
  std::vector<ckpt::LoadObject> objects = {{"dataloader", &dataloader}};
  const bool has_rng = rank < absl::GetFlag(FLAGS_saved_world);
  if (has_rng) objects.push_back({"rng", &rng});
  ckpt::LoadOptions load;
  const std::string from = absl::GetFlag(FLAGS_from);
  if (from == "memory") {
    load.from = ckpt::LoadOptions::From::kMemory;
  } else if (from == "durable") {
    load.from = ckpt::LoadOptions::From::kDurable;
  } else if (from != "any") {
    return Fail("flags", absl::InvalidArgumentError("--from is any, memory or durable"));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<ckpt::LoadResult> result =
      (*client)->Load(absl::GetFlag(FLAGS_step), tensors, objects, load);
  if (!result.ok()) return Fail("load", result.status());
  const int64_t* step = &result->step;
  const absl::Duration loaded = absl::Now() - start;
  for (const HostTensor& t : tensors) {
    int64_t first = -1;
    absl::StatusOr<int64_t> bad =
        ckpt::testing::CountMismatches(t, static_cast<char*>(t.data), &first);
    if (!bad.ok()) return Fail("check", bad.status());
    if (*bad != 0) {
      absl::FPrintF(stderr, "rank %d: tensor %s: %d bytes differ, first at packed offset %d\n",
                    rank, t.fqn, *bad, first);
      return 1;
    }
  }
  if (dataloader != ckpt::testing::DataloaderObjectBytes()) {
    absl::FPrintF(stderr, "rank %d: object dataloader differs\n", rank);
    return 1;
  }
  if (has_rng && rng != ckpt::testing::RngObjectBytes(rank)) {
    absl::FPrintF(stderr, "rank %d: object rng differs\n", rank);
    return 1;
  }
  absl::PrintF(
      "rank %d loaded step %d: %.1f MiB in %.1f ms, every byte checked, tiers=%s "
      "fallback_chunks=%d window_us=%d-%d\n",
      rank, *step, bytes / 1048576.0, Ms(loaded), absl::StrJoin(result->tiers, "+"),
      result->fallback_chunks, absl::ToUnixMicros(start), absl::ToUnixMicros(start + loaded));
  // Where the bytes came from (kind@host:bytes): they must add up to what
  // the rank copied, which must be its tensors and objects.
  const uint64_t expected = bytes + dataloader.size() + rng.size();
  uint64_t sourced = 0;
  std::vector<std::string> sources;
  for (const ckpt::LoadSource& s : result->sources) {
    sourced += s.bytes;
    sources.push_back(absl::StrCat(s.kind, "@", s.host, ":", s.bytes));
  }
  absl::PrintF("rank %d load sources=%s delivered_bytes=%d expected_bytes=%d\n", rank,
               absl::StrJoin(sources, ","), result->bytes, expected);
  if (sourced != result->bytes || result->bytes != expected) {
    absl::FPrintF(stderr, "rank %d: load sources add up to %d bytes, delivered %d, expected %d\n",
                  rank, sourced, result->bytes, expected);
    return 1;
  }
  return 0;
}
