// Load planning with resharding. Each case saves pattern tensors with
// PlanSave, "writes" the items into in-memory files exactly as the writers
// would (from the assigned rank's shard, at the item's file offset), then
// executes the load plan: reads every chunk from those files, applies its
// runs and compares every requested buffer byte for byte with the pattern.
#include "daemon/planning/load_planner.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_planner.h"
#include "proto/lib/copy_run.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

struct LoadStats {
  size_t reads = 0;
  size_t runs = 0;      // one per rank a CopyRun copies to
  size_t messages = 0;  // CopyRun messages (ranks given the same copy share one)
  size_t copies = 0;    // repetitions of strided runs
};

// Plans the load, checks its structure, executes it against saved.files and
// compares every destination with the pattern. Returns counts for callers
// that assert on them.
LoadStats LoadAndCheck(const Saved& saved, const std::vector<v1::NodeLoadPlan>& nodes) {
  absl::StatusOr<v1::LoadAssignment> plan = PlanLoad(saved.manifest, nodes);
  CKPT_REQUIRE_OK(plan);
  CHECK(plan->step() == 5);

  // Every stored chunk, by (file, offset).
  std::map<std::pair<std::string, uint64_t>, std::pair<std::string, v1::StoredChunk>> chunks;
  for (const v1::TensorEntry& t : saved.manifest.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) {
        REQUIRE(
            chunks.emplace(std::make_pair(c.file(), c.file_offset()), std::make_pair(t.fqn(), c))
                .second);
      }
    }
  }

  // Destination buffers and how often each byte was written.
  std::map<std::pair<int, uint32_t>, const v1::TensorShard*> requests;
  std::map<std::pair<int, uint32_t>, std::string> dest;
  std::map<std::pair<int, uint32_t>, std::vector<int>> written;
  for (const v1::NodeLoadPlan& node : nodes) {
    for (const v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
      for (int i = 0; i < rank.tensors_size(); ++i) {
        const std::pair<int, uint32_t> key{rank.rank(), static_cast<uint32_t>(i)};
        requests[key] = &rank.tensors(i);
        const size_t bytes = RegionElements(rank.tensors(i)).size() *
                             static_cast<size_t>(ElementSize(rank.tensors(i).dtype()));
        dest[key] = std::string(bytes, '\0');
        written[key] = std::vector<int>(bytes, 0);
      }
    }
  }

  // Sizes, per rank in request order.
  std::map<int, std::vector<uint64_t>> sizes;
  for (const v1::LoadAssignment::RankSizes& s : plan->sizes()) {
    REQUIRE(sizes
                .emplace(s.rank(),
                         std::vector<uint64_t>(s.tensor_bytes().begin(), s.tensor_bytes().end()))
                .second);
  }
  for (const auto& [key, buffer] : dest) {
    REQUIRE(sizes.count(key.first) == 1);
    REQUIRE(sizes[key.first].size() > key.second);
    CHECK(sizes[key.first][key.second] == buffer.size());
  }

  LoadStats stats;
  std::set<std::pair<std::string, uint64_t>> seen;
  for (const v1::ChunkRead& read : plan->reads()) {
    const v1::StoredChunk& c = read.chunk();
    INFO("read " << c.ShortDebugString());
    // (b) each chunk is read once, and it is a chunk of the manifest, CRC included.
    REQUIRE(seen.insert({c.file(), c.file_offset()}).second);
    auto found = chunks.find({c.file(), c.file_offset()});
    REQUIRE(found != chunks.end());
    CHECK(found->second.second.SerializeAsString() == c.SerializeAsString());
    CHECK(read.fqn() == found->second.first);
    CHECK_FALSE(read.runs().empty());
    auto file = saved.files.find(c.file());
    REQUIRE(file != saved.files.end());
    REQUIRE(c.file_offset() + c.length() <= file->second.size());
    const std::string bytes = file->second.substr(c.file_offset(), c.length());
    ++stats.reads;
    for (const v1::CopyRun& run : read.runs()) {
      INFO("run " << run.ShortDebugString());
      ++stats.messages;
      // Every rank of the run gets the same copy.
      std::vector<int> ranks;
      ForEachRunRank(run, [&](int rank) { ranks.push_back(rank); });
      for (int rank : ranks) {
        ++stats.runs;
        const std::pair<int, uint32_t> key{rank, run.request()};
        REQUIRE(dest.count(key) == 1);
        CHECK(requests[key]->fqn() == read.fqn());
        REQUIRE(run.length() > 0);
        // Strided runs: every repetition inside the chunk and the buffer.
        CKPT_REQUIRE_OK(CheckCopyRun(run, c.length(), dest[key].size()));
        stats.copies += CopyRunRepetitions(run);
        ForEachCopy(run, [&](uint64_t src, uint64_t dst, uint64_t length) {
          dest[key].replace(dst, length, bytes, src, length);
          for (uint64_t b = dst; b < dst + length; ++b) ++written[key][b];
        });
      }
    }
  }

  // (a) every byte of every request written exactly once; (c) the right bytes.
  for (const auto& [key, buffer] : dest) {
    INFO("rank " << key.first << " request " << key.second << ": "
                 << requests[key]->ShortDebugString());
    size_t not_once = 0;
    for (int w : written[key]) not_once += w != 1;
    CHECK(not_once == 0);
    const std::string expected = PackedBytes(*requests[key]);
    REQUIRE(expected.size() == buffer.size());
    size_t first_diff = buffer.size();
    for (size_t b = 0; b < buffer.size(); ++b) {
      if (buffer[b] != expected[b]) {
        first_diff = b;
        break;
      }
    }
    CHECK(first_diff == buffer.size());
  }
  return stats;
}

// Saves: a row-split fp32 weight, a flat-split bf16 embedding, a 4-d int8
// box-split tensor and a flat-split int16 with replicas, over 4 ranks.
std::vector<v1::NodeSavePlan> FourRankSave() {
  v1::NodeSavePlan h0 = Node("h0", 4, 2, {0, 1});
  v1::NodeSavePlan h1 = Node("h1", 4, 1, {2, 3});
  auto node = [&](int r) -> v1::NodeSavePlan& { return r < 2 ? h0 : h1; };
  const int64_t emb_cut[] = {0, 4001, 9000, 13000, 13000};
  for (int r = 0; r < 4; ++r) {
    // [256, 96] fp32: 64 rows per rank = 24576 B = 6 chunks.
    AddShard(node(r), r, BoxShard("w", v1::FLOAT32, {256, 96}, {64 * r, 0}, {64, 96}));
    // [100, 130] bf16 flat, uneven; rank 3 holds nothing of it.
    if (r < 3) {
      AddShard(node(r), r, FlatShard("emb", v1::BFLOAT16, {100, 130}, emb_cut[r], emb_cut[r + 1]));
    }
    // [6, 10, 14, 22] int8 split over dims 1 and 3: 4620 B each.
    AddShard(node(r), r,
             BoxShard("t4", v1::INT8, {6, 10, 14, 22}, {0, 5 * (r / 2), 0, 11 * (r % 2)},
                      {6, 5, 14, 11}));
    // [3000, 7] int16 flat, DP=2 replicas of two halves.
    AddShard(node(r), r,
             FlatShard("i16", v1::INT16, {3000, 7}, (r % 2) * 10500, (r % 2 + 1) * 10500));
    // fp64 [40, 50]: TP=2 over columns, replicated twice.
    AddShard(node(r), r, BoxShard("d", v1::FLOAT64, {40, 50}, {0, 25 * (r % 2)}, {40, 25}));
  }
  return {h0, h1};
}

TEST_CASE("load: box-saved fp32 read back as flat ranges, boxes and whole", "[load_planner]") {
  const Saved saved = Save(FourRankSave());
  SECTION("three uneven flat ranges") {
    LoadAndCheck(saved,
                 {LoadNode("a", {{0, {FlatShard("w", v1::FLOAT32, {256, 96}, 0, 5000)}},
                                 {1, {FlatShard("w", v1::FLOAT32, {256, 96}, 5000, 17001)}},
                                 {2, {FlatShard("w", v1::FLOAT32, {256, 96}, 17001, 24576)}}})});
  }
  SECTION("column boxes on two ranks") {
    LoadAndCheck(
        saved, {LoadNode("a", {{0, {BoxShard("w", v1::FLOAT32, {256, 96}, {0, 0}, {256, 37})}},
                               {1, {BoxShard("w", v1::FLOAT32, {256, 96}, {0, 37}, {256, 59})}}})});
  }
  SECTION("an interior box straddling stored shards and chunks") {
    LoadAndCheck(
        saved, {LoadNode("a", {{0, {BoxShard("w", v1::FLOAT32, {256, 96}, {30, 5}, {170, 83})}}})});
  }
  SECTION("whole, on hosts of 1 and 3 ranks") {
    const v1::TensorShard whole = Whole("w", v1::FLOAT32, {256, 96});
    LoadAndCheck(saved,
                 {LoadNode("a", {{0, {whole}}}),
                  LoadNode("b", {{1, {BoxShard("w", v1::FLOAT32, {256, 96}, {0, 0}, {128, 96})}},
                                 {2, {BoxShard("w", v1::FLOAT32, {256, 96}, {128, 0}, {128, 96})}},
                                 {3, {FlatShard("w", v1::FLOAT32, {256, 96}, 12345, 12346)}}})});
  }
}

TEST_CASE("load: flat-saved bf16 read back as boxes", "[load_planner]") {
  const Saved saved = Save(FourRankSave());
  const std::vector<int64_t> shape = {100, 130};
  LoadAndCheck(saved,
               {LoadNode("a", {{0, {BoxShard("emb", v1::BFLOAT16, shape, {0, 0}, {50, 65})}},
                               {1, {BoxShard("emb", v1::BFLOAT16, shape, {0, 65}, {50, 65})}},
                               {2, {BoxShard("emb", v1::BFLOAT16, shape, {50, 0}, {50, 65})}},
                               {3, {BoxShard("emb", v1::BFLOAT16, shape, {50, 65}, {50, 65})}},
                               {4,
                                {BoxShard("emb", v1::BFLOAT16, shape, {13, 7}, {71, 111}),
                                 FlatShard("emb", v1::BFLOAT16, shape, 3999, 9002)}}})});
}

TEST_CASE("load: 4-d int8 boxes resharded along other dimensions", "[load_planner]") {
  const Saved saved = Save(FourRankSave());
  const std::vector<int64_t> shape = {6, 10, 14, 22};
  Requests requests;
  int rank = 0;
  for (auto [o0, l0] : {std::pair<int64_t, int64_t>{0, 2}, {2, 4}}) {
    for (auto [o2, l2] : {std::pair<int64_t, int64_t>{0, 5}, {5, 9}}) {
      requests[rank++] = {BoxShard("t4", v1::INT8, shape, {o0, 0, o2, 0}, {l0, 10, l2, 22})};
    }
  }
  requests[rank++] = {FlatShard("t4", v1::INT8, shape, 1000, 17777)};
  requests[rank++] = {BoxShard("t4", v1::INT8, shape, {1, 3, 2, 9}, {4, 4, 11, 4})};
  LoadAndCheck(saved, {LoadNode("a", requests)});
}

TEST_CASE("load: flat int16 with replicas, read as boxes of a different world", "[load_planner]") {
  const Saved saved = Save(FourRankSave());
  // Replicas were written once: two stored shards, not four.
  for (const v1::TensorEntry& e : saved.manifest.tensors()) {
    if (e.fqn() == "i16") CHECK(e.shards_size() == 2);
    if (e.fqn() == "d") CHECK(e.shards_size() == 2);
  }
  Requests requests;
  for (int r = 0; r < 7; ++r) {
    // Uneven row blocks of [3000, 7].
    const int64_t begin = r * 3000 / 7;
    const int64_t end = (r + 1) * 3000 / 7;
    requests[r] = {BoxShard("i16", v1::INT16, {3000, 7}, {begin, 0}, {end - begin, 7}),
                   BoxShard("d", v1::FLOAT64, {40, 50}, {0, r * 7}, {40, r == 6 ? 8 : 7})};
  }
  LoadAndCheck(saved, {LoadNode("a", requests)});
}

TEST_CASE("load: three ranks asking for the whole tensor read each chunk once", "[load_planner]") {
  const Saved saved = Save(FourRankSave());
  size_t w_chunks = 0;
  for (const v1::TensorEntry& e : saved.manifest.tensors()) {
    if (e.fqn() != "w") continue;
    for (const v1::StoredShard& s : e.shards()) w_chunks += s.chunks_size();
  }
  CHECK(w_chunks == 24);  // 4 shards x 6 chunks
  const v1::TensorShard whole = Whole("w", v1::FLOAT32, {256, 96});
  // On one host and spread over two.
  LoadStats one = LoadAndCheck(saved, {LoadNode("a", {{0, {whole}}, {1, {whole}}, {2, {whole}}})});
  CHECK(one.reads == 24);
  CHECK(one.runs == 72);      // one copy per rank per chunk
  CHECK(one.messages == 24);  // the three ranks share each chunk's run
  LoadStats two = LoadAndCheck(
      saved, {LoadNode("a", {{0, {whole}}, {1, {whole}}}), LoadNode("b", {{2, {whole}}})});
  CHECK(two.reads == 24);
  CHECK(two.runs == 72);
  // The same rank asking twice is two requests, still one read per chunk.
  LoadStats twice = LoadAndCheck(saved, {LoadNode("a", {{0, {whole, whole}}})});
  CHECK(twice.reads == 24);
  CHECK(twice.runs == 48);
  CHECK(twice.messages == 48);  // two requests of one rank: a run each
}

TEST_CASE("load: only the chunks a request touches are read", "[load_planner]") {
  const Saved saved = Save(FourRankSave());
  // Rows 64-65 of w lie in the first chunk of rank 1's shard (2 x 384 B).
  LoadStats stats = LoadAndCheck(
      saved, {LoadNode("a", {{0, {BoxShard("w", v1::FLOAT32, {256, 96}, {64, 0}, {2, 96})}}})});
  CHECK(stats.reads == 1);
  CHECK(stats.runs == 1);
  absl::StatusOr<v1::LoadAssignment> plan =
      PlanLoad(saved.manifest,
               {LoadNode("a", {{0, {BoxShard("w", v1::FLOAT32, {256, 96}, {64, 0}, {2, 96})}}})});
  CKPT_REQUIRE_OK(plan);
  REQUIRE(plan->reads_size() == 1);
  const v1::CopyRun& run = plan->reads(0).runs(0);
  CHECK(plan->reads(0).chunk().shard_offset() == 0);
  CHECK(run.chunk_offset() == 0);
  CHECK(run.dest_offset() == 0);
  CHECK(run.length() == 768);
  // A flat range crossing a chunk boundary of rank 2's shard: two pieces.
  // Rank 2's shard starts at element 128 * 96 = 12288; chunk 1 at +1024 elements.
  plan = PlanLoad(saved.manifest,
                  {LoadNode("a", {{0, {FlatShard("w", v1::FLOAT32, {256, 96}, 13300, 13320)}}})});
  CKPT_REQUIRE_OK(plan);
  REQUIRE(plan->reads_size() == 2);
  std::map<uint64_t, v1::CopyRun> by_shard_offset;
  for (const v1::ChunkRead& r : plan->reads()) {
    REQUIRE(r.runs_size() == 1);
    by_shard_offset[r.chunk().shard_offset()] = r.runs(0);
  }
  REQUIRE(by_shard_offset.count(0) == 1);
  REQUIRE(by_shard_offset.count(4096) == 1);
  CHECK(by_shard_offset[0].chunk_offset() == (13300 - 12288) * 4);
  CHECK(by_shard_offset[0].dest_offset() == 0);
  CHECK(by_shard_offset[0].length() == (13312 - 13300) * 4);
  CHECK(by_shard_offset[4096].chunk_offset() == 0);
  CHECK(by_shard_offset[4096].dest_offset() == 48);
  CHECK(by_shard_offset[4096].length() == 32);
}

TEST_CASE("load: larger chunks and a single writer give the same bytes", "[load_planner]") {
  const Saved saved = Save(FourRankSave(), 1 << 20);
  LoadAndCheck(saved,
               {LoadNode("a", {{0, {FlatShard("w", v1::FLOAT32, {256, 96}, 7, 24000)}},
                               {1, {BoxShard("emb", v1::BFLOAT16, {100, 130}, {1, 2}, {98, 127})}},
                               {2, {Whole("t4", v1::INT8, {6, 10, 14, 22})}}})});
}

TEST_CASE("load: mixed box and flat stored shards of one tensor", "[load_planner]") {
  v1::NodeSavePlan node = SingleHost(3);
  AddShard(node, 0, BoxShard("m", v1::FLOAT16, {64, 100}, {0, 0}, {30, 100}));
  AddShard(node, 1, FlatShard("m", v1::FLOAT16, {64, 100}, 3000, 4567));
  AddShard(node, 2, FlatShard("m", v1::FLOAT16, {64, 100}, 4567, 6400));
  const Saved saved = Save({node});
  LoadAndCheck(saved,
               {LoadNode("a", {{0, {BoxShard("m", v1::FLOAT16, {64, 100}, {0, 33}, {64, 34})}},
                               {1, {FlatShard("m", v1::FLOAT16, {64, 100}, 2999, 4568)}},
                               {2, {Whole("m", v1::FLOAT16, {64, 100})}}})});
}

TEST_CASE("load: 0-d and zero-size tensors", "[load_planner]") {
  v1::NodeSavePlan node = SingleHost(2);
  AddShard(node, 0, Whole("scalar", v1::FLOAT32, {}));
  AddShard(node, 1, Whole("scalar", v1::FLOAT32, {}));
  AddShard(node, 0, Whole("empty", v1::FLOAT32, {3, 0}));
  AddShard(node, 1, Whole("empty", v1::FLOAT32, {3, 0}));
  const Saved saved = Save({node});
  v1::TensorShard scalar_box = Whole("scalar", v1::FLOAT32, {});
  scalar_box.mutable_region()->mutable_box();
  LoadStats stats = LoadAndCheck(
      saved,
      {LoadNode("a", {{0, {Whole("scalar", v1::FLOAT32, {}), Whole("empty", v1::FLOAT32, {3, 0})}},
                      {1, {scalar_box, BoxShard("empty", v1::FLOAT32, {3, 0}, {1, 0}, {2, 0})}}})});
  CHECK(stats.reads == 1);
  CHECK(stats.runs == 2);
  absl::StatusOr<v1::LoadAssignment> plan =
      PlanLoad(saved.manifest, {LoadNode("a", {{0, {Whole("empty", v1::FLOAT32, {3, 0})}}})});
  CKPT_REQUIRE_OK(plan);
  CHECK(plan->reads_size() == 0);
  REQUIRE(plan->sizes_size() == 1);
  REQUIRE(plan->sizes(0).tensor_bytes_size() == 1);
  CHECK(plan->sizes(0).tensor_bytes(0) == 0);
}

TEST_CASE("load: objects, per rank preferred over global", "[load_planner]") {
  v1::NodeSavePlan node = SingleHost(3);
  *RankOf(node, 0).add_objects() = Object("cfg", true, 300);
  *RankOf(node, 2).add_objects() = Object("cfg", true, 300);
  *RankOf(node, 1).add_objects() = Object("cfg", false, 17);
  for (int r = 0; r < 3; ++r) *RankOf(node, r).add_objects() = Object("rng", false, 40 + r);
  const Saved saved = Save({node});
  absl::StatusOr<v1::LoadAssignment> plan =
      PlanLoad(saved.manifest,
               {LoadNode("a", {}, {{0, {"cfg", "rng"}}, {1, {"rng", "cfg"}}, {2, {"cfg"}}})});
  CKPT_REQUIRE_OK(plan);
  CHECK(plan->reads_size() == 0);
  REQUIRE(plan->objects_size() == 5);
  std::map<std::pair<int, uint32_t>, const v1::ObjectRead*> reads;
  for (const v1::ObjectRead& r : plan->objects()) reads[{r.rank(), r.request()}] = &r;
  REQUIRE(reads.size() == 5);
  auto bytes_of = [&](const v1::ObjectRead& r) {
    const std::string& file = saved.files.at(r.chunk().file());
    return file.substr(r.chunk().file_offset(), r.chunk().length());
  };
  // rank 0: global cfg, own rng; rank 1: own rng, own cfg; rank 2: global cfg.
  CHECK(reads[{0, 0}]->key() == "cfg");
  CHECK(bytes_of(*reads[{0, 0}]) == ObjectBytes("cfg", -1, 300));
  CHECK(bytes_of(*reads[{0, 1}]) == ObjectBytes("rng", 0, 40));
  CHECK(bytes_of(*reads[{1, 0}]) == ObjectBytes("rng", 1, 41));
  CHECK(reads[{1, 1}]->key() == "cfg");
  CHECK(bytes_of(*reads[{1, 1}]) == ObjectBytes("cfg", 1, 17));
  CHECK(bytes_of(*reads[{2, 0}]) == ObjectBytes("cfg", -1, 300));
  // The chunk carries the manifest's CRC.
  for (const v1::ObjectEntry& o : saved.manifest.objects()) {
    if (o.key() == "cfg" && o.rank() == 1) {
      CHECK(reads[{1, 1}]->chunk().SerializeAsString() == o.chunk().SerializeAsString());
    }
  }
  std::map<int, std::vector<uint64_t>> sizes;
  for (const auto& s : plan->sizes())
    sizes[s.rank()] = {s.object_bytes().begin(), s.object_bytes().end()};
  CHECK(sizes == std::map<int, std::vector<uint64_t>>{{0, {300, 40}}, {1, {41, 17}}, {2, {300}}});

  CKPT_REQUIRE_ERROR(PlanLoad(saved.manifest, {LoadNode("a", {}, {{0, {"nope"}}})}),
                     absl::StatusCode::kNotFound, "object nope");
  // rank 2 has no per-rank rng and there is no global one.
  CKPT_REQUIRE_ERROR(PlanLoad(saved.manifest, {LoadNode("a", {}, {{3, {"rng"}}})}),
                     absl::StatusCode::kNotFound, "object rng", "rank 3");
}

TEST_CASE("load errors", "[load_planner]") {
  const Saved saved = Save(FourRankSave());
  auto plan = [&](const v1::TensorShard& s) {
    return PlanLoad(saved.manifest, {LoadNode("a", {{0, {s}}})});
  };
  CKPT_REQUIRE_ERROR(plan(Whole("nope", v1::FLOAT32, {4})), absl::StatusCode::kNotFound,
                     "tensor nope", "job step 5");
  CKPT_REQUIRE_ERROR(plan(Whole("w", v1::FLOAT16, {256, 96})), absl::StatusCode::kInvalidArgument,
                     "tensor w", "rank 0");
  CKPT_REQUIRE_ERROR(plan(Whole("w", v1::FLOAT32, {96, 256})), absl::StatusCode::kInvalidArgument,
                     "tensor w", "[96, 256]", "[256, 96]");
  CKPT_REQUIRE_ERROR(plan(Whole("w", v1::FLOAT32, {256 * 96})), absl::StatusCode::kInvalidArgument,
                     "tensor w");
  CKPT_REQUIRE_ERROR(plan(Whole("w", v1::FLOAT32, {256, 96, 1})),
                     absl::StatusCode::kInvalidArgument, "tensor w");
  CKPT_REQUIRE_ERROR(plan(BoxShard("w", v1::FLOAT32, {256, 96}, {200, 0}, {57, 96})),
                     absl::StatusCode::kInvalidArgument, "tensor w");
  CKPT_REQUIRE_ERROR(plan(FlatShard("w", v1::FLOAT32, {256, 96}, -1, 3)),
                     absl::StatusCode::kInvalidArgument, "tensor w");
  CKPT_REQUIRE_ERROR(plan(Whole("w/../x", v1::FLOAT32, {256, 96})),
                     absl::StatusCode::kInvalidArgument);
  // An error in a later node is still reported.
  CKPT_REQUIRE_ERROR(
      PlanLoad(saved.manifest, {LoadNode("a", {{0, {Whole("w", v1::FLOAT32, {256, 96})}}}),
                                LoadNode("b", {{1, {Whole("x", v1::FLOAT32, {1})}}})}),
      absl::StatusCode::kNotFound, "tensor x");
}

TEST_CASE("load of a partial save: only the stored coverage", "[load_planner]") {
  v1::NodeSavePlan node = SingleHost(2);
  node.set_partial(true);
  // Rows 0-9 and 20-29 of [40, 64] fp32; rows 10-19 and 30-39 are missing.
  AddShard(node, 0, BoxShard("p", v1::FLOAT32, {40, 64}, {0, 0}, {10, 64}));
  AddShard(node, 1, BoxShard("p", v1::FLOAT32, {40, 64}, {20, 0}, {10, 64}));
  const Saved saved = Save({node});
  LoadAndCheck(saved, {LoadNode("a", {{0, {BoxShard("p", v1::FLOAT32, {40, 64}, {2, 3}, {8, 60})}},
                                      {1, {FlatShard("p", v1::FLOAT32, {40, 64}, 1280, 1920)}}})});
  auto plan = [&](const v1::TensorShard& s) {
    return PlanLoad(saved.manifest, {LoadNode("a", {{0, {s}}})});
  };
  CKPT_REQUIRE_ERROR(plan(Whole("p", v1::FLOAT32, {40, 64})), absl::StatusCode::kFailedPrecondition,
                     "tensor p", "5120 of the 10240 bytes");
  CKPT_REQUIRE_ERROR(plan(BoxShard("p", v1::FLOAT32, {40, 64}, {9, 0}, {2, 64})),
                     absl::StatusCode::kFailedPrecondition, "tensor p");
  // One element past the stored flat coverage.
  CKPT_REQUIRE_ERROR(plan(FlatShard("p", v1::FLOAT32, {40, 64}, 1280, 1921)),
                     absl::StatusCode::kFailedPrecondition, "tensor p");
}

}  // namespace
}  // namespace ckpt::planning

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

TEST_CASE("load: one column of a tall tensor is a run per chunk, not per row", "[load_planner]") {
  // [2^24, 2] fp32 saved whole: 128 MiB in 32 chunks of 4 MiB. One column:
  // 2^24 elements 8 bytes apart.
  const int64_t rows = int64_t{1} << 24;
  v1::NodeSavePlan node = SingleHost(1);
  AddShard(node, 0, Whole("w", v1::FLOAT32, {rows, 2}));
  absl::StatusOr<v1::SaveAssignment> a = PlanSave({node}, SavePlannerOptions{});
  CKPT_REQUIRE_OK(a);
  const v1::CheckpointManifest manifest = planning::ManifestOf(*a);
  REQUIRE(manifest.tensors(0).shards(0).chunks_size() == 32);
  v1::NodeLoadPlan load;
  load.mutable_host()->set_host("h0");
  v1::NodeLoadPlan::RankRequests* rank = load.add_ranks();
  *rank->add_tensors() = BoxShard("w", v1::FLOAT32, {rows, 2}, {0, 1}, {rows, 1});
  absl::StatusOr<v1::LoadAssignment> plan = PlanLoad(manifest, {load});
  CKPT_REQUIRE_OK(plan);
  REQUIRE(plan->reads_size() == 32);
  uint64_t copies = 0;
  for (const v1::ChunkRead& read : plan->reads()) {
    // Chunks hold whole rows: one strided run each.
    REQUIRE(read.runs_size() == 1);
    const v1::CopyRun& run = read.runs(0);
    CHECK(run.length() == 4);
    CHECK(run.count() == (4u << 20) / 8);
    CHECK(run.chunk_stride() == 8);
    CHECK(run.dest_stride() == 4);
    CHECK(run.chunk_offset() == 4);
    CKPT_REQUIRE_OK(CheckCopyRun(run, read.chunk().length(), rows * 4));
    copies += CopyRunRepetitions(run);
  }
  CHECK(copies == static_cast<uint64_t>(rows));
}

TEST_CASE("load: runs that straddle chunk boundaries are cut", "[load_planner]") {
  // Rows of 3 fp32 in 4096-byte chunks: rows cross chunk boundaries; the
  // byte-exact executor checks every byte lands once.
  v1::NodeSavePlan node = SingleHost(1);
  AddShard(node, 0, Whole("w", v1::FLOAT32, {1000, 3}));
  const Saved saved = Save({node});
  for (int64_t col = 0; col < 3; ++col) {
    LoadStats stats = LoadAndCheck(
        saved,
        {LoadNode("a", {{0, {BoxShard("w", v1::FLOAT32, {1000, 3}, {0, col}, {1000, 1})}}})});
    CHECK(stats.copies == 1000);
    CHECK(stats.runs <= 3 * 3 + 3);  // 3 chunks: a block and a straddler each at most
  }
  LoadAndCheck(saved,
               {LoadNode("a", {{0, {BoxShard("w", v1::FLOAT32, {1000, 3}, {1, 1}, {998, 2})}}})});
}

// Layers of a model: tensors of one dtype and shape saved by the same
// ranks in the same regions. The planner works out where a request meets
// them once and maps it onto each tensor's own chunks.
std::vector<v1::NodeSavePlan> LayersSave() {
  v1::NodeSavePlan node = SingleHost(4);
  for (int r = 0; r < 4; ++r) {
    for (int layer = 0; layer < 3; ++layer) {
      AddShard(node, r,
               BoxShard(absl::StrCat("layers.", layer, ".w"), v1::FLOAT32, {64, 96}, {16 * r, 0},
                        {16, 96}));
    }
    // The same dtype and shape split another way, and the same split of
    // another dtype: layouts of their own.
    AddShard(node, r, BoxShard("cols", v1::FLOAT32, {64, 96}, {0, 24 * r}, {64, 24}));
    AddShard(node, r, BoxShard("half", v1::FLOAT16, {64, 96}, {16 * r, 0}, {16, 96}));
  }
  return {node};
}

TEST_CASE("load: tensors stored alike each read their own chunks", "[load_planner]") {
  const Saved saved = Save(LayersSave(), 4096);
  std::vector<v1::TensorShard> wanted;
  for (const char* fqn : {"layers.0.w", "layers.1.w", "layers.2.w", "cols"}) {
    wanted.push_back(BoxShard(fqn, v1::FLOAT32, {64, 96}, {8, 10}, {40, 50}));
  }
  wanted.push_back(BoxShard("half", v1::FLOAT16, {64, 96}, {8, 10}, {40, 50}));
  // Every tensor asked for the same box by two ranks, and at other places
  // of their lists by a third.
  std::vector<v1::TensorShard> reversed(wanted.rbegin(), wanted.rend());
  const LoadStats stats =
      LoadAndCheck(saved, {LoadNode("a", {{0, wanted}, {1, wanted}, {2, reversed}})});
  // Per rank: 6 runs for each layer (row-split: a run per chunk), 10 for
  // the column split, 3 for the fp16 tensor. Ranks 0 and 1 share every
  // run; rank 2 shares only layers.2.w's, asked for at the same place.
  CHECK(stats.runs == 3 * 31);
  CHECK(stats.messages == 31 + 31 - 6);
}

// Ranks asking for the very same list (data-parallel replicas of the new
// layout) get an earlier rank's copies without a lookup per request.
TEST_CASE("load: whole-rank replicas share copies, and only exact ones", "[load_planner]") {
  const Saved saved = Save(LayersSave());
  auto rows = [](int part) {
    std::vector<v1::TensorShard> list;
    for (int layer = 0; layer < 3; ++layer) {
      list.push_back(BoxShard(absl::StrCat("layers.", layer, ".w"), v1::FLOAT32, {64, 96},
                              {32 * part, 0}, {32, 96}));
    }
    return list;
  };
  // Ranks 0-1 and 2-3 ask for the two halves; rank 4 for half 0 but one
  // tensor's rows moved by one; rank 5 for many distinct flat ranges.
  std::vector<v1::TensorShard> near = rows(0);
  near[1] = BoxShard("layers.1.w", v1::FLOAT32, {64, 96}, {1, 0}, {32, 96});
  std::vector<v1::TensorShard> ranges;
  for (int k = 0; k < 12; ++k) {
    ranges.push_back(FlatShard(absl::StrCat("layers.", k % 3, ".w"), v1::FLOAT32, {64, 96}, 100 * k,
                               100 * k + 7 + k));
  }
  // Rank 6 asks for half 0 in another order.
  std::vector<v1::TensorShard> reordered = rows(0);
  std::reverse(reordered.begin(), reordered.end());
  const LoadStats stats =
      LoadAndCheck(saved, {LoadNode("a", {{0, rows(0)}, {1, rows(1)}}),
                           LoadNode("b", {{2, rows(0)}, {3, rows(1)}}),
                           LoadNode("c", {{4, near}, {5, ranges}, {6, reordered}})});
  CHECK(stats.messages < stats.runs);

  // A replica's own device buffer is still checked.
  std::vector<v1::TensorShard> bad = rows(1);
  bad[2].mutable_device_buffer()->set_allocation_bytes(8);
  CKPT_REQUIRE_ERROR(
      PlanLoad(saved.manifest, {LoadNode("a", {{0, rows(1)}, {1, rows(0)}, {2, bad}})}),
      absl::StatusCode::kInvalidArgument, "rank 2", "device buffer");
}

TEST_CASE("load: a tensor stored like another is checked against its own chunks",
          "[load_planner]") {
  const Saved saved = Save(LayersSave());
  v1::CheckpointManifest m = saved.manifest;
  for (v1::TensorEntry& t : *m.mutable_tensors()) {
    if (t.fqn() == "layers.2.w") t.mutable_shards(1)->mutable_chunks(0)->set_length(100);
  }
  std::vector<v1::TensorShard> all;
  for (int layer = 0; layer < 3; ++layer) {
    all.push_back(Whole(absl::StrCat("layers.", layer, ".w"), v1::FLOAT32, {64, 96}));
  }
  CKPT_REQUIRE_ERROR(PlanLoad(m, {LoadNode("a", {{0, all}})}), absl::StatusCode::kDataLoss,
                     "tensor layers.2.w shard 1");
  // A tensor of that layout holding only part of its shape: partial.
  m = saved.manifest;
  for (v1::TensorEntry& t : *m.mutable_tensors()) {
    if (t.fqn() == "layers.1.w") t.mutable_shards()->RemoveLast();
  }
  all.resize(2);
  CKPT_REQUIRE_ERROR(PlanLoad(m, {LoadNode("a", {{0, all}})}),
                     absl::StatusCode::kFailedPrecondition, "layers.1.w");
}

TEST_CASE("load: a manifest whose chunks do not tile their shard is DATA_LOSS", "[load_planner]") {
  v1::NodeSavePlan node = SingleHost(1);
  AddShard(node, 0, Whole("w", v1::FLOAT32, {4096}));
  const Saved saved = Save({node});
  const Requests requests = {{0, {Whole("w", v1::FLOAT32, {4096})}}};
  auto mangle = [&](auto&& edit) {
    v1::CheckpointManifest m = saved.manifest;
    edit(*m.mutable_tensors(0)->mutable_shards(0));
    return PlanLoad(m, {LoadNode("a", requests)});
  };
  CKPT_REQUIRE_OK(mangle([](v1::StoredShard&) {}));
  CKPT_REQUIRE_ERROR(mangle([](v1::StoredShard& s) { s.clear_chunks(); }),
                     absl::StatusCode::kDataLoss, "chunks hold 0 of the shard's 16384 bytes");
  CKPT_REQUIRE_ERROR(mangle([](v1::StoredShard& s) { s.mutable_chunks(1)->set_length(100); }),
                     absl::StatusCode::kDataLoss, "tensor w shard 0");
  CKPT_REQUIRE_ERROR(mangle([](v1::StoredShard& s) { s.mutable_chunks(0)->set_shard_offset(8); }),
                     absl::StatusCode::kDataLoss, "does not continue");
  CKPT_REQUIRE_ERROR(
      mangle([](v1::StoredShard& s) { s.mutable_chunks(3)->set_length(~uint64_t{0}); }),
      absl::StatusCode::kDataLoss, "does not continue");
  CKPT_REQUIRE_ERROR(mangle([](v1::StoredShard& s) {
                       s.mutable_region()->mutable_box()->add_offsets(4000);
                       s.mutable_region()->mutable_box()->add_lengths(1000);
                     }),
                     absl::StatusCode::kInvalidArgument, "stored");
}

TEST_CASE("load: bounds and degenerate requests", "[load_planner][limits]") {
  v1::NodeSavePlan node = SingleHost(1);
  AddShard(node, 0, Whole("w", v1::INT8, {100, 100, 4}));
  AddShard(node, 0, Whole("scalar", v1::INT64, {}));
  AddShard(node, 0, Whole("empty", v1::FLOAT32, {3, 0}));
  *RankOf(node, 0).add_objects() = Object("nothing", false, 0);
  const Saved saved = Save({node});
  // A 3-d box cut in two inner dimensions: a run per outer index.
  RequestLimits limits;
  limits.max_runs_per_shard = 99;
  const Requests cut = {{0, {BoxShard("w", v1::INT8, {100, 100, 4}, {0, 0, 1}, {100, 99, 2})}}};
  CKPT_REQUIRE_ERROR(PlanLoad(saved.manifest, {LoadNode("a", cut)}, limits),
                     absl::StatusCode::kResourceExhausted, "--max_runs_per_shard");
  limits.max_runs_per_shard = 100;
  CKPT_REQUIRE_OK(PlanLoad(saved.manifest, {LoadNode("a", cut)}, limits));
  LoadAndCheck(saved, {LoadNode("a", cut)});
  limits.max_tensors_per_plan = 1;
  const Requests two = {{0, {Whole("scalar", v1::INT64, {}), Whole("empty", v1::FLOAT32, {3, 0})}}};
  CKPT_REQUIRE_ERROR(PlanLoad(saved.manifest, {LoadNode("a", two)}, limits),
                     absl::StatusCode::kResourceExhausted, "--max_tensors_per_plan");
  // 0-d and zero-size tensors and a 0-byte object load fine.
  LoadAndCheck(saved, {LoadNode("a", two)});
  v1::NodeLoadPlan objects = LoadNode("a", {{0, {}}});
  objects.mutable_ranks(0)->add_object_keys("nothing");
  absl::StatusOr<v1::LoadAssignment> plan = PlanLoad(saved.manifest, {objects});
  CKPT_REQUIRE_OK(plan);
  REQUIRE(plan->objects_size() == 1);
  CHECK(plan->objects(0).chunk().length() == 0);
  CHECK(plan->sizes(0).object_bytes(0) == 0);
}

}  // namespace
}  // namespace ckpt::planning
