// Save planning: replicas de-duplicated, distinct regions kept once each,
// worst-fit balance over ranks and writer files, the file layout the writers
// and the manifest agree on, and every way a plan can be wrong.
#include "daemon/planning/save_planner.h"
#include "daemon/planning/planned_manifest.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/lib/align.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

absl::StatusOr<v1::SaveAssignment> Plan(const std::vector<v1::NodeSavePlan>& nodes,
                                        uint64_t chunk_bytes = 4096) {
  return PlanSave(nodes, PlannerOptions(chunk_bytes));
}

std::vector<v1::WriteItem> AllItems(const v1::SaveAssignment& a) {
  std::vector<v1::WriteItem> out;
  for (const v1::HostAssignment& h : a.hosts()) {
    for (const v1::WriteItem& item : h.items()) out.push_back(item);
  }
  return out;
}

// Every item with the file its host's part names for its writer.
std::vector<std::pair<std::string, v1::WriteItem>> FiledItems(const v1::SaveAssignment& a) {
  std::vector<std::pair<std::string, v1::WriteItem>> out;
  for (const v1::HostAssignment& h : a.hosts()) {
    for (const v1::WriteItem& item : h.items()) {
      REQUIRE(item.writer() >= 0);
      REQUIRE(item.writer() < h.files_size());
      out.emplace_back(h.files(item.writer()), item);
    }
  }
  return out;
}

v1::TensorEntry Entry(const v1::SaveAssignment& a, const std::string& fqn) {
  const v1::CheckpointManifest manifest = planning::ManifestOf(a);
  for (const v1::TensorEntry& e : manifest.tensors()) {
    if (e.fqn() == fqn) return e;
  }
  FAIL("no manifest entry for " << fqn);
  throw 0;
}

// Padded bytes written per rank and per file.
std::map<int, uint64_t> RankLoads(const v1::SaveAssignment& a) {
  std::map<int, uint64_t> out;
  for (const v1::WriteItem& item : AllItems(a)) out[item.rank()] += AlignUp(item.bytes(), 4096);
  return out;
}
std::map<std::string, uint64_t> FileEnds(const v1::SaveAssignment& a) {
  std::map<std::string, uint64_t> out;
  for (const auto& [file, item] : FiledItems(a)) {
    out[file] = std::max(out[file], item.file_offset() + AlignUp(item.bytes(), 4096));
  }
  return out;
}

// Every check of the writers' file layout that holds for any valid plan.
void CheckLayout(const v1::SaveAssignment& a) {
  const uint64_t chunk = a.chunk_bytes();
  // Items per file, sorted by offset: aligned, not overlapping.
  std::map<std::string, std::vector<v1::WriteItem>> by_file;
  for (size_t h = 0; h < static_cast<size_t>(a.hosts_size()); ++h) {
    const v1::HostAssignment& host = a.hosts(static_cast<int>(h));
    for (const v1::WriteItem& item : host.items()) {
      INFO("item " << item.ShortDebugString());
      REQUIRE(item.writer() >= 0);
      REQUIRE(item.writer() < host.files_size());
      const std::string& file = host.files(item.writer());
      CHECK(file == "data/" + host.host().host() + "-" + std::to_string(item.writer()) + ".bin");
      by_file[file].push_back(item);
    }
  }
  for (auto& [file, items] : by_file) {
    std::sort(items.begin(), items.end(), [](const v1::WriteItem& x, const v1::WriteItem& y) {
      return x.file_offset() < y.file_offset();
    });
    for (size_t i = 0; i < items.size(); ++i) {
      INFO(file << " item " << items[i].ShortDebugString());
      CHECK(items[i].file_offset() % 4096 == 0);
      if (i > 0) CHECK(items[i - 1].file_offset() + items[i - 1].bytes() <= items[i].file_offset());
    }
  }
  // Each stored shard / object matches exactly one tensor WriteItem by its
  // first chunk, and its chunks tile the item.
  std::map<std::pair<std::string, uint64_t>, std::pair<std::string, v1::WriteItem>> tensor_items,
      object_items;
  for (const auto& [file, item] : FiledItems(a)) {
    if (item.bytes() == 0) continue;  // zero-byte items have no chunk to match by
    auto& table = item.is_object() ? object_items : tensor_items;
    CHECK(
        table.emplace(std::make_pair(file, item.file_offset()), std::make_pair(file, item)).second);
  }
  size_t matched = 0;
  const v1::CheckpointManifest manifest = planning::ManifestOf(a);
  for (const v1::TensorEntry& entry : manifest.tensors()) {
    for (const v1::StoredShard& shard : entry.shards()) {
      INFO(entry.fqn() << " shard " << shard.ShortDebugString());
      if (shard.chunks_size() == 0) continue;
      auto it = tensor_items.find({shard.chunks(0).file(), shard.chunks(0).file_offset()});
      REQUIRE(it != tensor_items.end());
      ++matched;
      const auto& [file, item] = it->second;
      CHECK(shard.writer_rank() == item.rank());
      uint64_t offset = 0;
      for (int c = 0; c < shard.chunks_size(); ++c) {
        const v1::StoredChunk& ch = shard.chunks(c);
        CHECK(ch.file() == file);
        CHECK(ch.shard_offset() == offset);
        CHECK(ch.file_offset() == item.file_offset() + offset);
        CHECK(ch.crc32c() == 0);
        const bool last = c + 1 == shard.chunks_size();
        if (last) {
          CHECK(ch.length() == item.bytes() - offset);
          CHECK(ch.length() > 0);
          CHECK(ch.length() <= chunk);
        } else {
          CHECK(ch.length() == chunk);
        }
        offset += ch.length();
      }
      CHECK(offset == item.bytes());
    }
  }
  CHECK(matched == tensor_items.size());
  size_t objects_matched = 0;
  for (const v1::ObjectEntry& object : manifest.objects()) {
    if (object.chunk().length() == 0) continue;
    auto it = object_items.find({object.chunk().file(), object.chunk().file_offset()});
    REQUIRE(it != object_items.end());
    CHECK(object.chunk().length() == it->second.second.bytes());
    CHECK(object.chunk().shard_offset() == 0);
    ++objects_matched;
  }
  CHECK(objects_matched == object_items.size());
}

TEST_CASE("replicas of a whole tensor are written once", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(4);
  for (int r = 0; r < 4; ++r) AddShard(node, r, Whole("w", v1::FLOAT32, {16, 16}));
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);

  REQUIRE(a->hosts_size() == 1);
  REQUIRE(a->hosts(0).items_size() == 1);
  const v1::WriteItem& item = a->hosts(0).items(0);
  CHECK(item.rank() == 0);
  CHECK_FALSE(item.is_object());
  CHECK(item.index() == 0);
  CHECK(item.bytes() == 1024);
  CHECK(item.writer() == 0);
  CHECK(item.file_offset() == 0);
  CHECK(std::vector<std::string>(a->hosts(0).files().begin(), a->hosts(0).files().end()) ==
        std::vector<std::string>{"data/h0-0.bin"});

  const v1::CheckpointManifest m = planning::ManifestOf(*a);
  CHECK(m.format_version() == 1);
  CHECK(m.job() == "job");
  CHECK(m.step() == 5);
  CHECK(m.topology().world_size() == 4);
  REQUIRE(m.topology().hosts_size() == 1);
  CHECK(m.topology().hosts(0).host() == "h0");
  REQUIRE(m.tensors_size() == 1);
  const v1::TensorEntry& e = m.tensors(0);
  CHECK(e.fqn() == "w");
  CHECK(e.dtype() == v1::FLOAT32);
  CHECK(std::vector<int64_t>(e.global_shape().begin(), e.global_shape().end()) ==
        std::vector<int64_t>{16, 16});
  CHECK_FALSE(e.partial());
  REQUIRE(e.shards_size() == 1);
  CHECK(e.shards(0).region().kind_case() == v1::Region::KIND_NOT_SET);
  CHECK(e.shards(0).writer_rank() == 0);
  REQUIRE(e.shards(0).chunks_size() == 1);
  CHECK(e.shards(0).chunks(0).file() == "data/h0-0.bin");
  CHECK(e.shards(0).chunks(0).file_offset() == 0);
  CHECK(e.shards(0).chunks(0).shard_offset() == 0);
  CHECK(e.shards(0).chunks(0).length() == 1024);
  CHECK(m.objects_size() == 0);
  CheckLayout(*a);
}

TEST_CASE("replicas across hosts are written once, by the least-loaded host", "[save_planner]") {
  // Two hosts, two ranks each; "a" (big) is held by all four ranks, "b" by all.
  v1::NodeSavePlan h0 = Node("h0", 4, 1, {0, 1});
  v1::NodeSavePlan h1 = Node("h1", 4, 1, {2, 3});
  for (int r : {0, 1}) {
    AddShard(h0, r, Whole("a", v1::FLOAT32, {4096}));
    AddShard(h0, r, Whole("b", v1::FLOAT32, {2048}));
  }
  for (int r : {2, 3}) {
    AddShard(h1, r, Whole("a", v1::FLOAT32, {4096}));
    AddShard(h1, r, Whole("b", v1::FLOAT32, {2048}));
  }
  auto a = Plan({h0, h1});
  CKPT_REQUIRE_OK(a);
  REQUIRE(a->hosts_size() == 2);
  REQUIRE(a->hosts(0).items_size() == 1);
  REQUIRE(a->hosts(1).items_size() == 1);
  // Largest first to host 0 (rank 0); the next one to the idle host 1 (rank 2).
  CHECK(a->hosts(0).items(0).rank() == 0);
  CHECK(a->hosts(0).items(0).bytes() == 16384);
  CHECK(a->hosts(0).files(a->hosts(0).items(0).writer()) == "data/h0-0.bin");
  CHECK(a->hosts(1).items(0).rank() == 2);
  CHECK(a->hosts(1).items(0).bytes() == 8192);
  CHECK(a->hosts(1).files(a->hosts(1).items(0).writer()) == "data/h1-0.bin");
  CHECK(a->hosts(1).items(0).file_offset() == 0);
  CHECK(Entry(*a, "a").shards_size() == 1);
  CHECK(Entry(*a, "b").shards_size() == 1);
  CHECK(Entry(*a, "b").shards(0).writer_rank() == 2);
  CHECK(a->manifest_template().topology().hosts_size() == 2);
  CheckLayout(*a);
}

TEST_CASE("TP box shards: one item per distinct region", "[save_planner]") {
  // [8, 6] fp16: TP=2 over rows, DP=2: ranks 0,1 hold rows 0-3; ranks 2,3 rows 4-7.
  v1::NodeSavePlan node = SingleHost(4);
  const v1::TensorShard top = BoxShard("w", v1::FLOAT16, {8, 6}, {0, 0}, {4, 6});
  const v1::TensorShard bottom = BoxShard("w", v1::FLOAT16, {8, 6}, {4, 0}, {4, 6});
  AddShard(node, 0, top);
  AddShard(node, 1, top);
  AddShard(node, 2, bottom);
  AddShard(node, 3, bottom);
  // Column split [4, 8] fp32 over all four ranks: non-contiguous regions.
  for (int r = 0; r < 4; ++r) {
    AddShard(node, r, BoxShard("c", v1::FLOAT32, {4, 8}, {0, 2 * r}, {4, 2}));
  }
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  const std::vector<v1::WriteItem> items = AllItems(*a);
  REQUIRE(items.size() == 6);

  const v1::TensorEntry w = Entry(*a, "w");
  REQUIRE(w.shards_size() == 2);
  std::set<std::string> regions;
  for (const v1::StoredShard& s : w.shards()) {
    CHECK(s.chunks_size() == 1);
    CHECK(s.chunks(0).length() == 48);
    regions.insert(s.region().SerializeAsString());
  }
  CHECK(regions == std::set<std::string>{top.region().SerializeAsString(),
                                         bottom.region().SerializeAsString()});
  const v1::TensorEntry c = Entry(*a, "c");
  REQUIRE(c.shards_size() == 4);
  std::set<int64_t> column_offsets;
  for (const v1::StoredShard& s : c.shards()) {
    REQUIRE(s.region().has_box());
    column_offsets.insert(s.region().box().offsets(1));
    // The column shard is written by the only rank that holds it.
    CHECK(s.writer_rank() == s.region().box().offsets(1) / 2);
    CHECK(s.chunks(0).length() == 32);
  }
  CHECK(column_offsets == std::set<int64_t>{0, 2, 4, 6});
  // Each w region by the least-loaded of its holders: "c" items (32 B) come
  // after "w" items (48 B); the top goes to rank 0, the bottom to rank 2.
  for (const v1::WriteItem& item : items) {
    if (item.bytes() == 48) {
      CHECK((item.rank() == 0 || item.rank() == 2));
      CHECK(item.index() == 0);
    } else {
      CHECK(item.bytes() == 32);
      CHECK(item.index() == 1);
    }
  }
  CheckLayout(*a);
}

TEST_CASE("FSDP flat ranges: one item per range, chunked", "[save_planner]") {
  // [10, 700] fp32 = 7000 elements cut mid-row into three uneven ranges.
  v1::NodeSavePlan node = SingleHost(3);
  AddShard(node, 0, FlatShard("f", v1::FLOAT32, {10, 700}, 0, 2401));
  AddShard(node, 1, FlatShard("f", v1::FLOAT32, {10, 700}, 2401, 4800));
  AddShard(node, 2, FlatShard("f", v1::FLOAT32, {10, 700}, 4800, 7000));
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  const std::vector<v1::WriteItem> items = AllItems(*a);
  REQUIRE(items.size() == 3);
  std::map<int, uint64_t> bytes_by_rank;
  for (const v1::WriteItem& item : items) bytes_by_rank[item.rank()] = item.bytes();
  CHECK(bytes_by_rank == std::map<int, uint64_t>{{0, 9604}, {1, 9596}, {2, 8800}});
  const v1::TensorEntry f = Entry(*a, "f");
  REQUIRE(f.shards_size() == 3);
  for (const v1::StoredShard& s : f.shards()) {
    REQUIRE(s.region().has_flat());
    // 9604 B -> 4096 + 4096 + 1412; 9596 -> 4096 + 4096 + 1404; 8800 -> 4096 + 4096 + 608.
    REQUIRE(s.chunks_size() == 3);
    const uint64_t bytes = 4 * (s.region().flat().end() - s.region().flat().begin());
    CHECK(s.chunks(2).length() == bytes - 8192);
    CHECK(s.writer_rank() == (s.region().flat().begin() == 0      ? 0
                              : s.region().flat().begin() == 2401 ? 1
                                                                  : 2));
  }
  CheckLayout(*a);
}

// Every stored shard is written from a shard of its own tensor and region.
void CheckSources(const v1::NodeSavePlan& node, const v1::SaveAssignment& a) {
  std::map<std::pair<std::string, uint64_t>, v1::WriteItem> items;
  for (const v1::HostAssignment& host : a.hosts()) {
    for (const v1::WriteItem& item : host.items()) {
      items[{host.files(item.writer()), item.file_offset()}] = item;
    }
  }
  const v1::CheckpointManifest manifest = planning::ManifestOf(a);
  for (const v1::TensorEntry& entry : manifest.tensors()) {
    for (const v1::StoredShard& stored : entry.shards()) {
      INFO(entry.fqn() << " shard " << stored.ShortDebugString());
      REQUIRE(stored.chunks_size() > 0);
      auto found = items.find({stored.chunks(0).file(), stored.chunks(0).file_offset()});
      REQUIRE(found != items.end());
      const v1::WriteItem& item = found->second;
      auto rank = std::find_if(node.ranks().begin(), node.ranks().end(),
                               [&](const v1::RankSavePlan& r) { return r.rank() == item.rank(); });
      REQUIRE(rank != node.ranks().end());
      const v1::TensorShard& source = rank->shards(static_cast<int>(item.index()));
      CHECK(source.fqn() == entry.fqn());
      CHECK(source.region().SerializeAsString() == stored.region().SerializeAsString());
    }
  }
}

// Data-parallel replicas list the very same shards: the planner knows a
// rank whose list equals an earlier rank's without looking up each shard.
TEST_CASE("whole-rank replicas are found, and only exact ones", "[save_planner]") {
  // 12 tensors of a layer in 3 row parts; ranks 3-8 replicate ranks 0-2.
  v1::NodeSavePlan node = SingleHost(9);
  for (int r = 0; r < 9; ++r) {
    for (int t = 0; t < 12; ++t) {
      AddShard(node, r,
               BoxShard(absl::StrCat("l.w", t), v1::FLOAT32, {6, 8}, {2 * (r % 3), 0}, {2, 8}));
    }
  }
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  CHECK(AllItems(*a).size() == 36);
  CheckSources(node, *a);
  // Each part's 12 items spread over the 3 ranks that hold it.
  for (const auto& [rank, bytes] : RankLoads(*a)) {
    INFO("rank " << rank);
    CHECK(bytes == 4 * 4096);
  }
  CheckLayout(*a);

  // Like rank 2 but for one tensor's rows: not a replica, and those rows
  // overlap rank 0's and rank 1's.
  v1::NodeSavePlan near = node;
  *RankOf(near, 8).mutable_shards(5) = BoxShard("l.w5", v1::FLOAT32, {6, 8}, {1, 0}, {2, 8});
  CKPT_REQUIRE_ERROR(Plan({near}), absl::StatusCode::kInvalidArgument, "tensor l.w5", "overlaps");
  // Like rank 2 but listing a tensor twice: refused, as from any rank.
  near = node;
  *RankOf(near, 8).mutable_shards(5) = RankOf(near, 8).shards(4);
  CKPT_REQUIRE_ERROR(Plan({near}), absl::StatusCode::kInvalidArgument, "rank 8", "twice");
  // A replica listing its tensors in another order is planned shard by
  // shard, to the same items.
  v1::NodeSavePlan reordered = node;
  auto* shards = RankOf(reordered, 8).mutable_shards();
  std::reverse(shards->begin(), shards->end());
  a = Plan({reordered});
  CKPT_REQUIRE_OK(a);
  CHECK(AllItems(*a).size() == 36);
  CheckLayout(*a);
  CheckSources(reordered, *a);
}

TEST_CASE("a rank's tensors alike share a geometry; other dtypes and shapes do not",
          "[save_planner]") {
  // The same rows of tensors of two dtypes and two shapes, on two ranks
  // (partial: they hold 4 of wide's 6 columns).
  v1::NodeSavePlan node = SingleHost(2);
  node.set_partial(true);
  for (int r = 0; r < 2; ++r) {
    for (const char* fqn : {"a", "b"}) {
      AddShard(node, r, BoxShard(fqn, v1::FLOAT32, {8, 4}, {4 * r, 0}, {4, 4}));
    }
    AddShard(node, r, BoxShard("half", v1::FLOAT16, {8, 4}, {4 * r, 0}, {4, 4}));
    AddShard(node, r, BoxShard("wide", v1::FLOAT32, {8, 6}, {4 * r, 0}, {4, 4}));
    AddShard(node, r, BoxShard("wide2", v1::FLOAT32, {8, 6}, {4 * r, 0}, {4, 4}));
  }
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  std::map<std::string, uint64_t> bytes;
  const v1::CheckpointManifest manifest = planning::ManifestOf(*a);
  for (const v1::TensorEntry& e : manifest.tensors()) {
    REQUIRE(e.shards_size() == 2);
    for (const v1::StoredShard& s : e.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) bytes[e.fqn()] += c.length();
    }
  }
  CHECK(bytes == std::map<std::string, uint64_t>{
                     {"a", 128}, {"b", 128}, {"half", 64}, {"wide", 128}, {"wide2", 128}});
  CheckSources(node, *a);

  // Each shard's own device buffer is checked, even where the geometry
  // was known from a tensor alike.
  v1::NodeSavePlan bad = node;
  v1::TensorShard* b = RankOf(bad, 1).mutable_shards(1);
  b->mutable_device_buffer()->set_allocation_bytes(60);
  CKPT_REQUIRE_ERROR(Plan({bad}), absl::StatusCode::kInvalidArgument, "rank 1", "tensor b",
                     "device buffer");
}

TEST_CASE("ranks of many distinct regions are planned shard by shard", "[save_planner]") {
  // FSDP: every tensor cut at its own place; ranks 2 and 3 replicate 0 and 1.
  v1::NodeSavePlan node = SingleHost(4);
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 12; ++t) {
      const int64_t n = 64 + t;
      const int64_t cut = n / 2 + t % 3;
      AddShard(node, r,
               r % 2 == 0 ? FlatShard(absl::StrCat("f", t), v1::FLOAT32, {n}, 0, cut)
                          : FlatShard(absl::StrCat("f", t), v1::FLOAT32, {n}, cut, n));
    }
  }
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  CHECK(AllItems(*a).size() == 24);
  for (const auto& [rank, bytes] : RankLoads(*a)) {
    INFO("rank " << rank);
    CHECK(bytes == 6 * 4096);
  }
  CheckLayout(*a);
  CheckSources(node, *a);
}

TEST_CASE("mixed shards: boxes, flat ranges and replicas in one save", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(4, 2);
  // A replicated bias, a TP weight, and an FSDP parameter.
  for (int r = 0; r < 4; ++r) AddShard(node, r, Whole("bias", v1::BFLOAT16, {1000}));
  AddShard(node, 0, BoxShard("w", v1::FLOAT32, {64, 64}, {0, 0}, {64, 32}));
  AddShard(node, 1, BoxShard("w", v1::FLOAT32, {64, 64}, {0, 32}, {64, 32}));
  AddShard(node, 2, BoxShard("w", v1::FLOAT32, {64, 64}, {0, 0}, {64, 32}));
  AddShard(node, 3, BoxShard("w", v1::FLOAT32, {64, 64}, {0, 32}, {64, 32}));
  for (int r = 0; r < 4; ++r)
    AddShard(node, r,
             FlatShard("p", v1::INT8, {3, 3333}, 2500 * r, std::min(9999, 2500 * (r + 1))));
  // One tensor where a box on rank 0 and a flat range on rank 1 are the same
  // elements (rows 1-2 of [4, 6] = [6, 18)): replicas, written once. Rank 2
  // holds the rest as a flat range and a box.
  AddShard(node, 0, BoxShard("m", v1::INT32, {4, 6}, {1, 0}, {2, 6}));
  AddShard(node, 1, FlatShard("m", v1::INT32, {4, 6}, 6, 18));
  AddShard(node, 2, FlatShard("m", v1::INT32, {4, 6}, 0, 6));
  AddShard(node, 2, BoxShard("m", v1::INT32, {4, 6}, {3, 0}, {1, 6}));
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  CHECK(Entry(*a, "bias").shards_size() == 1);
  CHECK(Entry(*a, "w").shards_size() == 2);
  CHECK(Entry(*a, "p").shards_size() == 4);
  const v1::TensorEntry m = Entry(*a, "m");
  REQUIRE(m.shards_size() == 3);
  // The replicated middle is stored with rank 0's region (the first holder).
  int middle = 0;
  for (const v1::StoredShard& s : m.shards()) {
    if (s.chunks(0).length() == 48) {
      ++middle;
      REQUIRE(s.region().has_box());
      CHECK(s.region().box().offsets(0) == 1);
    } else {
      CHECK(s.chunks(0).length() == 24);
      CHECK(s.writer_rank() == 2);
    }
  }
  CHECK(middle == 1);
  CHECK(AllItems(*a).size() == 1 + 2 + 4 + 3);
  CheckLayout(*a);
}

TEST_CASE("worst-fit: largest first to distinct ranks, exact balance", "[save_planner]") {
  // 8 tensors of 8, 7, ..., 1 pages, replicated on 4 ranks.
  v1::NodeSavePlan node = SingleHost(4);
  for (int r = 0; r < 4; ++r) {
    for (int k = 1; k <= 8; ++k) {
      AddShard(node, r, Whole("t" + std::to_string(k), v1::FLOAT32, {1024 * k}));
    }
  }
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  const std::vector<v1::WriteItem> items = AllItems(*a);
  REQUIRE(items.size() == 8);
  // Items are listed in assignment order, largest first.
  for (size_t i = 0; i < items.size(); ++i) CHECK(items[i].bytes() == 4096 * (8 - i));
  // t8..t5 -> ranks 0..3; then t4 -> 3, t3 -> 2, t2 -> 1, t1 -> 0: 9 pages each.
  std::vector<int> ranks;
  std::vector<uint32_t> indexes;
  for (const v1::WriteItem& item : items) {
    ranks.push_back(item.rank());
    indexes.push_back(item.index());
  }
  CHECK(ranks == std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0});
  CHECK(indexes == std::vector<uint32_t>{7, 6, 5, 4, 3, 2, 1, 0});
  CHECK(RankLoads(*a) == std::map<int, uint64_t>{{0, 36864}, {1, 36864}, {2, 36864}, {3, 36864}});
  CheckLayout(*a);
}

TEST_CASE("worst-fit: uneven sizes stay within the largest item", "[save_planner]") {
  const std::vector<int64_t> sizes = {1000, 5000, 12345, 300, 77777, 4097, 9999, 20000};
  v1::NodeSavePlan node = SingleHost(4);
  for (int r = 0; r < 4; ++r) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      AddShard(node, r, Whole("t" + std::to_string(k), v1::INT8, {sizes[k]}));
    }
  }
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  const std::vector<v1::WriteItem> items = AllItems(*a);
  REQUIRE(items.size() == 8);
  // The four largest go first, to four distinct ranks.
  std::set<int> first_ranks;
  for (size_t i = 0; i < 4; ++i) first_ranks.insert(items[i].rank());
  CHECK(first_ranks == std::set<int>{0, 1, 2, 3});
  CHECK(items[0].bytes() == 77777);
  CHECK(items[1].bytes() == 20000);
  CHECK(items[2].bytes() == 12345);
  CHECK(items[3].bytes() == 9999);
  const std::map<int, uint64_t> loads = RankLoads(*a);
  REQUIRE(loads.size() == 4);
  uint64_t lo = UINT64_MAX, hi = 0, total = 0;
  for (const auto& [rank, load] : loads) {
    lo = std::min(lo, load);
    hi = std::max(hi, load);
    total += load;
  }
  CHECK(hi - lo <= AlignUp(77777, 4096));
  uint64_t expected_total = 0;
  for (int64_t s : sizes) expected_total += AlignUp(s, 4096);
  CHECK(total == expected_total);
  // In pages: 77777 -> r0 (19); 20000 -> r1 (5); 12345 -> r2 (4); 9999 -> r3 (3);
  // 5000 -> r3 (5); 4097 -> r2 (6); 1000 -> r1 (6); 300 -> r3 (6).
  CHECK(loads ==
        std::map<int, uint64_t>{{0, 19 * 4096}, {1, 6 * 4096}, {2, 6 * 4096}, {3, 6 * 4096}});
  CheckLayout(*a);
}

TEST_CASE("worst-fit: two writer threads get balanced files", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(4, /*writer_threads=*/2);
  for (int r = 0; r < 4; ++r) {
    for (int k = 1; k <= 8; ++k) {
      AddShard(node, r, Whole("t" + std::to_string(k), v1::FLOAT32, {1024 * k}));
    }
  }
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  REQUIRE(a->hosts(0).files_size() == 2);
  CHECK(a->hosts(0).files(0) == "data/h0-0.bin");
  CHECK(a->hosts(0).files(1) == "data/h0-1.bin");
  // Pages: t8 -> w0 (8), t7 -> w1 (7), t6 -> w1 (13), t5 -> w0 (13),
  // t4 -> w0 (17), t3 -> w1 (16), t2 -> w1 (18), t1 -> w0 (18).
  std::vector<int> writers;
  std::vector<uint64_t> offsets;
  for (const v1::WriteItem& item : AllItems(*a)) {
    writers.push_back(item.writer());
    offsets.push_back(item.file_offset() / 4096);
  }
  CHECK(writers == std::vector<int>{0, 1, 1, 0, 0, 1, 1, 0});
  CHECK(offsets == std::vector<uint64_t>{0, 0, 7, 8, 13, 13, 16, 17});
  CHECK(FileEnds(*a) == std::map<std::string, uint64_t>{{"data/h0-0.bin", 18 * 4096},
                                                        {"data/h0-1.bin", 18 * 4096}});
  // Ranks are balanced independently of files.
  CHECK(RankLoads(*a) == std::map<int, uint64_t>{{0, 36864}, {1, 36864}, {2, 36864}, {3, 36864}});
  CheckLayout(*a);
}

TEST_CASE("writer file layout: aligned, disjoint, chunked", "[save_planner]") {
  // Odd sizes, several writers, two hosts, objects mixed in, small chunks.
  v1::NodeSavePlan h0 = Node("h0", 4, 3, {0, 1});
  v1::NodeSavePlan h1 = Node("h1", 4, 2, {2, 3});
  auto add = [&](int rank, const v1::TensorShard& s) { AddShard(rank < 2 ? h0 : h1, rank, s); };
  for (int r = 0; r < 4; ++r) {
    add(r, FlatShard("emb", v1::BFLOAT16, {5003, 7}, r * 8755, r == 3 ? 35021 : (r + 1) * 8755));
    add(r, BoxShard("w", v1::FLOAT32, {33, 40}, {0, r * 10}, {33, 10}));
    add(r, Whole("norm", v1::FLOAT64, {777}));
    v1::NodeSavePlan& node = r < 2 ? h0 : h1;
    *RankOf(node, r).add_objects() = Object("rng", false, 5000 + r);
    *RankOf(node, r).add_objects() = Object("sched", true, 12289);
  }
  auto a = Plan({h0, h1}, 8192);
  CKPT_REQUIRE_OK(a);
  CHECK(a->chunk_bytes() == 8192);
  CheckLayout(*a);
  // Shard offsets step by chunk_bytes: emb shard of rank 0 is 17510 B = 8192 + 8192 + 1126.
  const v1::TensorEntry emb = Entry(*a, "emb");
  REQUIRE(emb.shards_size() == 4);
  for (const v1::StoredShard& s : emb.shards()) {
    std::vector<uint64_t> shard_offsets, lengths;
    for (const v1::StoredChunk& c : s.chunks()) {
      shard_offsets.push_back(c.shard_offset());
      lengths.push_back(c.length());
    }
    const uint64_t bytes = 2 * (s.region().flat().end() - s.region().flat().begin());
    if (bytes == 17510) {
      CHECK(shard_offsets == std::vector<uint64_t>{0, 8192, 16384});
      CHECK(lengths == std::vector<uint64_t>{8192, 8192, 1126});
    } else {
      CHECK(bytes == 17512);  // the last rank's 8756 elements
      CHECK(shard_offsets == std::vector<uint64_t>{0, 8192, 16384});
      CHECK(lengths == std::vector<uint64_t>{8192, 8192, 1128});
    }
  }
  // Total bytes written equals the unique bytes.
  uint64_t total = 0;
  for (const v1::WriteItem& item : AllItems(*a)) total += item.bytes();
  CHECK(total == 35021 * 2 + 33 * 40 * 4 + 777 * 8 + (5000 + 5001 + 5002 + 5003) + 12289);
}

TEST_CASE("a tensor whose size is an exact multiple of chunk_bytes", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(1);
  AddShard(node, 0, Whole("x", v1::FLOAT32, {3072}));  // 12288 B = 3 chunks exactly
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  const v1::StoredShard s = Entry(*a, "x").shards(0);
  REQUIRE(s.chunks_size() == 3);
  for (int c = 0; c < 3; ++c) {
    CHECK(s.chunks(c).length() == 4096);
    CHECK(s.chunks(c).shard_offset() == 4096u * c);
  }
  CheckLayout(*a);
}

TEST_CASE("global objects are de-duplicated, per-rank objects kept", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(4);
  for (int r = 0; r < 4; ++r) {
    *RankOf(node, r).add_objects() = Object("loader", false, 10 + r);
    *RankOf(node, r).add_objects() = Object("hparams", true, 100);
  }
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  const std::vector<v1::WriteItem> items = AllItems(*a);
  REQUIRE(items.size() == 5);
  for (const v1::WriteItem& item : items) CHECK(item.is_object());
  std::map<std::pair<std::string, int>, uint64_t> objects;
  for (const v1::ObjectEntry& o : a->manifest_template().objects()) {
    CHECK(objects.emplace(std::make_pair(o.key(), o.rank()), o.chunk().length()).second);
  }
  CHECK(objects == std::map<std::pair<std::string, int>, uint64_t>{{{"hparams", -1}, 100},
                                                                   {{"loader", 0}, 10},
                                                                   {{"loader", 1}, 11},
                                                                   {{"loader", 2}, 12},
                                                                   {{"loader", 3}, 13}});
  // Per-rank objects are written by their own rank, at their own index.
  for (const v1::WriteItem& item : items) {
    if (item.bytes() != 100) {
      CHECK(item.bytes() == 10u + item.rank());
      CHECK(item.index() == 0);
    } else {
      CHECK(item.index() == 1);
    }
  }
  CHECK(a->manifest_template().tensors_size() == 0);
  CheckLayout(*a);
}

TEST_CASE("a global object with different lengths is an error", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(2);
  *RankOf(node, 0).add_objects() = Object("hparams", true, 100);
  *RankOf(node, 1).add_objects() = Object("hparams", true, 101);
  CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "global object hparams",
                     "101", "100");
}

TEST_CASE("object errors: bad key, listed twice", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(1);
  SECTION("bad key") {
    *RankOf(node, 0).add_objects() = Object("a/b", false, 1);
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "rank 0", "a/b");
  }
  SECTION("twice") {
    *RankOf(node, 0).add_objects() = Object("k", false, 1);
    *RankOf(node, 0).add_objects() = Object("k", true, 1);
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "object k", "twice");
  }
}

TEST_CASE("0-d and zero-size tensors", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(2);
  // A scalar as "whole" on rank 0 and as a 0-d box on rank 1: replicas.
  AddShard(node, 0, Whole("step_count", v1::INT64, {}));
  v1::TensorShard scalar_box = Whole("step_count", v1::INT64, {});
  scalar_box.mutable_region()->mutable_box();
  AddShard(node, 1, scalar_box);
  AddShard(node, 0, Whole("empty", v1::FLOAT32, {0, 5}));
  AddShard(node, 1, Whole("empty", v1::FLOAT32, {0, 5}));
  AddShard(node, 0, Whole("x", v1::FLOAT32, {2000}));
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  const v1::TensorEntry scalar = Entry(*a, "step_count");
  CHECK(scalar.global_shape_size() == 0);
  REQUIRE(scalar.shards_size() == 1);
  REQUIRE(scalar.shards(0).chunks_size() == 1);
  CHECK(scalar.shards(0).chunks(0).length() == 8);
  CHECK(scalar.shards(0).chunks(0).file_offset() % 4096 == 0);
  const v1::TensorEntry empty = Entry(*a, "empty");
  REQUIRE(empty.shards_size() == 1);
  CHECK(empty.shards(0).chunks_size() == 0);
  CHECK_FALSE(empty.partial());
  const std::vector<v1::WriteItem> items = AllItems(*a);
  REQUIRE(items.size() == 3);
  std::multiset<uint64_t> sizes;
  for (const v1::WriteItem& i : items) sizes.insert(i.bytes());
  CHECK(sizes == std::multiset<uint64_t>{0, 8, 8000});
  CheckLayout(*a);
}

TEST_CASE("user metadata reaches the manifest", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(1);
  (*node.mutable_user_metadata())["framework"] = "torch";
  AddShard(node, 0, Whole("x", v1::UINT8, {3}));
  auto a = Plan({node});
  CKPT_REQUIRE_OK(a);
  CHECK(a->manifest_template().user_metadata().at("framework") == "torch");
}

TEST_CASE("shard errors name the tensor", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(2);
  SECTION("dtype mismatch between ranks") {
    AddShard(node, 0, Whole("layer.w", v1::FLOAT32, {4, 4}));
    AddShard(node, 1, Whole("layer.w", v1::FLOAT16, {4, 4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w", "rank 1",
                       "rank 0");
  }
  SECTION("shape mismatch between ranks") {
    AddShard(node, 0, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {0, 0}, {2, 4}));
    AddShard(node, 1, BoxShard("layer.w", v1::FLOAT32, {4, 5}, {2, 0}, {2, 5}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w", "[4, 5]",
                       "[4, 4]");
  }
  SECTION("overlapping boxes") {
    AddShard(node, 0, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {0, 0}, {3, 4}));
    AddShard(node, 1, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {2, 0}, {2, 4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w",
                       "overlaps");
  }
  SECTION("overlapping boxes that share no whole row") {
    // Columns 0-2 and 2-3 of all rows: their runs interleave.
    AddShard(node, 0, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {0, 0}, {4, 3}));
    AddShard(node, 1, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {0, 2}, {4, 2}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w",
                       "overlaps");
  }
  SECTION("flat range overlapping a box") {
    AddShard(node, 0, FlatShard("layer.w", v1::FLOAT32, {4, 4}, 0, 9));
    AddShard(node, 1, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {2, 0}, {2, 4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w",
                       "overlaps");
  }
  SECTION("a box inside another on the same rank") {
    AddShard(node, 0, Whole("layer.w", v1::FLOAT32, {4, 4}));
    AddShard(node, 1, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {1, 1}, {1, 1}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w",
                       "overlaps");
  }
  SECTION("a save that does not cover the tensor") {
    AddShard(node, 0, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {0, 0}, {2, 4}));
    AddShard(node, 1, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {2, 0}, {1, 4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w",
                       "12 of 16", "partial");
    node.set_partial(true);
    AddShard(node, 0, Whole("layer.b", v1::FLOAT32, {4}));
    auto a = Plan({node});
    CKPT_REQUIRE_OK(a);
    CHECK(Entry(*a, "layer.w").partial());
    CHECK(Entry(*a, "layer.w").shards_size() == 2);
    // Covered whole by the partial save: not partial itself.
    CHECK_FALSE(Entry(*a, "layer.b").partial());
  }
  SECTION("region out of bounds") {
    AddShard(node, 0, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {3, 0}, {2, 4}));
    AddShard(node, 1, Whole("other", v1::FLOAT32, {1}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w",
                       "rank 0");
  }
  SECTION("flat range out of bounds") {
    AddShard(node, 1, FlatShard("layer.w", v1::FLOAT32, {4, 4}, 8, 17));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w",
                       "rank 1");
  }
  SECTION("box rank differs from the shape's") {
    AddShard(node, 0, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {0}, {4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w");
  }
  SECTION("negative dimension") {
    AddShard(node, 0, Whole("layer.w", v1::FLOAT32, {-1, 4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w");
  }
  SECTION("negative box length") {
    AddShard(node, 0, BoxShard("layer.w", v1::FLOAT32, {4, 4}, {2, 0}, {-1, 4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w");
  }
  SECTION("element count overflows") {
    AddShard(node, 0, Whole("layer.w", v1::INT8, {int64_t{1} << 40, int64_t{1} << 40}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w");
  }
  SECTION("byte count overflows") {
    // 2^62 elements fit in int64; 2^62 * 4 bytes do not.
    AddShard(
        node, 0,
        BoxShard("layer.w", v1::FLOAT32, {int64_t{1} << 31, int64_t{1} << 31}, {0, 0}, {1, 1}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w");
  }
  SECTION("unspecified dtype") {
    AddShard(node, 0, Whole("layer.w", v1::DTYPE_UNSPECIFIED, {4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "tensor layer.w");
  }
  SECTION("bad tensor name") {
    AddShard(node, 0, Whole("../etc", v1::FLOAT32, {4}));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "../etc");
  }
  SECTION("same region listed twice by one rank") {
    AddShard(node, 0, Whole("layer.w", v1::FLOAT32, {4}));
    AddShard(node, 0, FlatShard("layer.w", v1::FLOAT32, {4}, 0, 4));
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "layer.w", "twice");
  }
}

TEST_CASE("plan errors: ranks, hosts, job", "[save_planner]") {
  SECTION("a rank listed twice on one host") {
    v1::NodeSavePlan node = Node("h0", 2, 1, {0, 1, 1});
    CKPT_REQUIRE_ERROR(Plan({node}), absl::StatusCode::kInvalidArgument, "rank 1 appears twice");
  }
  SECTION("a rank listed by two hosts") {
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 2, 1, {0, 1}), Node("h1", 2, 1, {1})}),
                       absl::StatusCode::kInvalidArgument, "rank 1 appears twice");
  }
  SECTION("a missing rank") {
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 3, 1, {0, 2})}), absl::StatusCode::kInvalidArgument,
                       "rank 1 of 3 has no plan");
  }
  SECTION("a rank outside the world") {
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 2, 1, {0, 1, 2})}), absl::StatusCode::kInvalidArgument,
                       "rank 2 is outside world size 2");
  }
  SECTION("job with a path") {
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 1, 1, {0}, "../x")}), absl::StatusCode::kInvalidArgument,
                       "../x");
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 1, 1, {0}, "..")}), absl::StatusCode::kInvalidArgument);
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 1, 1, {0}, "")}), absl::StatusCode::kInvalidArgument);
  }
  SECTION("bad host name") {
    CKPT_REQUIRE_ERROR(Plan({Node("h/0", 1, 1, {0})}), absl::StatusCode::kInvalidArgument, "h/0");
  }
  SECTION("the same host twice") {
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 2, 1, {0}), Node("h0", 2, 1, {1})}),
                       absl::StatusCode::kInvalidArgument, "host h0 appears twice");
  }
  SECTION("hosts disagree on the step") {
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 2, 1, {0}), Node("h1", 2, 1, {1}, "job", 6)}),
                       absl::StatusCode::kInvalidArgument, "h1");
  }
  SECTION("no writer threads") {
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 1, 0, {0})}), absl::StatusCode::kInvalidArgument, "h0");
  }
  SECTION("negative step, zero world") {
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 1, 1, {0}, "job", -1)}), absl::StatusCode::kInvalidArgument,
                       "step -1");
    CKPT_REQUIRE_ERROR(Plan({Node("h0", 0, 1, {})}), absl::StatusCode::kInvalidArgument,
                       "world size 0");
  }
  SECTION("no hosts") { CKPT_REQUIRE_ERROR(Plan({}), absl::StatusCode::kInvalidArgument); }
  SECTION("chunk size not a multiple of the alignment") {
    v1::NodeSavePlan node = SingleHost(1);
    SavePlannerOptions o = PlannerOptions();
    o.chunk_bytes = 6000;
    CKPT_REQUIRE_ERROR(PlanSave({node}, o), absl::StatusCode::kInvalidArgument, "6000");
    o.chunk_bytes = 0;
    CKPT_REQUIRE_ERROR(PlanSave({node}, o), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ckpt::planning

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

TEST_CASE("a 0-byte object's chunk is final in the plan", "[save_planner]") {
  v1::NodeSavePlan node = SingleHost(1);
  AddShard(node, 0, Whole("x", v1::FLOAT32, {4}));
  *RankOf(node, 0).add_objects() = Object("empty", false, 0);
  *RankOf(node, 0).add_objects() = Object("after", false, 10);
  absl::StatusOr<v1::SaveAssignment> a = PlanSave({node}, SavePlannerOptions{});
  CKPT_REQUIRE_OK(a);
  int needs = 0;
  for (const v1::ObjectEntry& o : a->manifest_template().objects()) {
    if (o.key() == "empty") {
      CHECK(o.chunk().length() == 0);
      CHECK(o.chunk().crc32c() == 0);  // CRC32C of no bytes
      CHECK_FALSE(SaveChunkNeedsChecksum(o.chunk()));
    } else {
      CHECK(SaveChunkNeedsChecksum(o.chunk()));
      ++needs;
    }
  }
  CHECK(needs == 1);
  // Its write item says 0 bytes: the node queues no write for it.
  int empty_items = 0;
  for (const v1::WriteItem& w : a->hosts(0).items()) empty_items += w.bytes() == 0;
  CHECK(empty_items == 1);
}

TEST_CASE("columns of a tall tensor plan without a run per row", "[save_planner]") {
  // Two columns of a [2^24, 2] fp32 tensor on two ranks: 64 MiB each.
  const int64_t rows = int64_t{1} << 24;
  v1::NodeSavePlan node = SingleHost(2);
  AddShard(node, 0, BoxShard("w", v1::FLOAT32, {rows, 2}, {0, 0}, {rows, 1}));
  AddShard(node, 1, BoxShard("w", v1::FLOAT32, {rows, 2}, {0, 1}, {rows, 1}));
  absl::StatusOr<v1::SaveAssignment> a = PlanSave({node}, SavePlannerOptions{});
  CKPT_REQUIRE_OK(a);
  const v1::CheckpointManifest manifest = planning::ManifestOf(*a);
  const v1::TensorEntry& w = manifest.tensors(0);
  REQUIRE(w.shards_size() == 2);
  CHECK(w.shards(0).chunks_size() == 16);  // 64 MiB in 4 MiB chunks
  // Overlapping columns are still caught.
  v1::NodeSavePlan bad = SingleHost(2);
  AddShard(bad, 0, BoxShard("w", v1::FLOAT32, {rows, 2}, {0, 0}, {rows, 2}));
  AddShard(bad, 1, BoxShard("w", v1::FLOAT32, {rows, 2}, {0, 1}, {rows, 1}));
  CKPT_REQUIRE_ERROR(PlanSave({bad}, SavePlannerOptions{}), absl::StatusCode::kInvalidArgument,
                     "overlaps");
  // A flat range and a column replicate nothing and overlap.
  v1::NodeSavePlan mixed = SingleHost(2);
  AddShard(mixed, 0, FlatShard("w", v1::FLOAT32, {rows, 2}, 3, 5));
  AddShard(mixed, 1, BoxShard("w", v1::FLOAT32, {rows, 2}, {0, 1}, {rows, 1}));
  CKPT_REQUIRE_ERROR(PlanSave({mixed}, SavePlannerOptions{}), absl::StatusCode::kInvalidArgument,
                     "overlaps");
}

TEST_CASE("save planner bounds", "[save_planner][limits]") {
  SavePlannerOptions options;
  SECTION("world size") {
    options.limits.max_world_size = 4;
    v1::NodeSavePlan node = SingleHost(5);
    CKPT_REQUIRE_ERROR(PlanSave({node}, options), absl::StatusCode::kResourceExhausted,
                       "world size 5; the limit is 4 (--max_world_size)");
    // A huge world size is refused before anything is sized by it.
    node.set_world_size(std::numeric_limits<int32_t>::max());
    CKPT_REQUIRE_ERROR(PlanSave({node}, SavePlannerOptions{}), absl::StatusCode::kResourceExhausted,
                       "--max_world_size");
  }
  SECTION("distinct regions per tensor") {
    options.limits.max_regions_per_tensor = 3;
    v1::NodeSavePlan node = SingleHost(4);
    for (int r = 0; r < 4; ++r) {
      AddShard(node, r, BoxShard("w", v1::FLOAT32, {8, 4}, {0, r}, {8, 1}));
    }
    CKPT_REQUIRE_ERROR(PlanSave({node}, options), absl::StatusCode::kResourceExhausted, "tensor w",
                       "the limit is 3 (--max_regions_per_tensor)");
    options.limits.max_regions_per_tensor = 4;
    CKPT_REQUIRE_OK(PlanSave({node}, options));
  }
  SECTION("a replica's box with more dimensions than allowed") {
    // The tensor is known from rank 0; rank 1's box is refused before the
    // planner copies it to find its replicas.
    v1::NodeSavePlan node = SingleHost(2);
    AddShard(node, 0, BoxShard("w", v1::FLOAT32, {8, 4}, {0, 0}, {8, 4}));
    v1::TensorShard wide = BoxShard("w", v1::FLOAT32, {8, 4}, {0, 0}, {8, 4});
    for (int d = 0; d < 100000; ++d) wide.mutable_region()->mutable_box()->add_offsets(0);
    AddShard(node, 1, wide);
    CKPT_REQUIRE_ERROR(PlanSave({node}, options), absl::StatusCode::kResourceExhausted, "rank 1",
                       "--max_dims");
  }
  SECTION("replicas spelled alike are grouped without being validated again") {
    // 64 ranks hold the same two halves: two items, each with 32 holders.
    v1::NodeSavePlan node = SingleHost(64);
    for (int r = 0; r < 64; ++r) {
      AddShard(node, r, BoxShard("w", v1::FLOAT32, {8, 4}, {(r % 2) * 4, 0}, {4, 4}));
      AddShard(node, r, Whole("b", v1::FLOAT32, {3}));
    }
    absl::StatusOr<v1::SaveAssignment> a = PlanSave({node}, options);
    CKPT_REQUIRE_OK(a);
    CHECK(Entry(*a, "w").shards_size() == 2);
    CHECK(Entry(*a, "b").shards_size() == 1);
    // A replica whose device buffer lies outside its allocation is still
    // refused: each holder's buffer is its own.
    v1::TensorShard bad = BoxShard("w", v1::FLOAT32, {8, 4}, {0, 0}, {4, 4});
    bad.mutable_device_buffer()->set_allocation_bytes(8);
    *RankOf(node, 63).mutable_shards(0) = bad;
    CKPT_REQUIRE_ERROR(PlanSave({node}, options), absl::StatusCode::kInvalidArgument, "rank 63",
                       "device buffer");
  }
  SECTION("shards and objects") {
    options.limits.max_shard_bytes = 32;
    v1::NodeSavePlan node = SingleHost(1);
    AddShard(node, 0, Whole("w", v1::FLOAT32, {9}));
    CKPT_REQUIRE_ERROR(PlanSave({node}, options), absl::StatusCode::kResourceExhausted,
                       "rank 0: ", "tensor w", "--max_shard_bytes");
    v1::NodeSavePlan objects = SingleHost(1);
    *RankOf(objects, 0).add_objects() = Object("o", false, ~uint64_t{0});
    CKPT_REQUIRE_ERROR(PlanSave({objects}, SavePlannerOptions{}),
                       absl::StatusCode::kResourceExhausted, "--max_object_bytes");
  }
  SECTION("user metadata") {
    options.limits.max_user_metadata_entries = 1;
    v1::NodeSavePlan node = SingleHost(1);
    (*node.mutable_user_metadata())["a"] = "1";
    (*node.mutable_user_metadata())["b"] = "2";
    CKPT_REQUIRE_ERROR(PlanSave({node}, options), absl::StatusCode::kResourceExhausted,
                       "--max_user_metadata_entries");
  }
  SECTION("chunks per save") {
    options.chunk_bytes = 4096;
    options.limits.max_chunks_per_save = 4;
    v1::NodeSavePlan node = SingleHost(1);
    AddShard(node, 0, Whole("w", v1::UINT8, {4 * 4096 + 1}));
    CKPT_REQUIRE_ERROR(
        PlanSave({node}, options), absl::StatusCode::kResourceExhausted,
        "the save needs 5 chunks of 4096 bytes; the limit is 4 (--max_chunks_per_save");
    options.limits.max_chunks_per_save = 5;
    CKPT_REQUIRE_OK(PlanSave({node}, options));
    // One column of a tensor of 2^38 rows: a short request for 2^28 chunks
    // of 4 KiB, refused before any is built.
    v1::NodeSavePlan tall = SingleHost(1);
    tall.set_partial(true);
    const int64_t rows = int64_t{1} << 38;
    AddShard(tall, 0, BoxShard("tall", v1::FLOAT32, {rows, 1 << 20}, {0, 7}, {rows, 1}));
    CKPT_REQUIRE_ERROR(PlanSave({tall}, PlannerOptions(4096)), absl::StatusCode::kResourceExhausted,
                       "needs 268435456 chunks", "--max_chunks_per_save");
  }
  SECTION("a plan whose manifest would not load") {
    // An object longer than the manifest's bound (4 GiB by default; ckptd
    // sets it from --max_object_bytes).
    v1::NodeSavePlan objects = SingleHost(1);
    *RankOf(objects, 0).add_objects() = Object("o", false, (uint64_t{4} << 30) + 1);
    CKPT_REQUIRE_ERROR(PlanSave({objects}, SavePlannerOptions{}),
                       absl::StatusCode::kFailedPrecondition,
                       "would commit a checkpoint that cannot be loaded", "object");
    // Tensors over all ranks beyond the manifest's bound.
    SavePlannerOptions few;
    few.manifest_limits.max_tensors = 2;
    v1::NodeSavePlan node = SingleHost(3);
    for (int r = 0; r < 3; ++r) AddShard(node, r, Whole("w" + std::to_string(r), v1::FLOAT32, {4}));
    CKPT_REQUIRE_ERROR(PlanSave({node}, few), absl::StatusCode::kFailedPrecondition,
                       "cannot be loaded", "3 tensors");
    // A manifest larger than the catalog reads.
    SavePlannerOptions small;
    small.manifest_limits.max_manifest_bytes = 64;
    CKPT_REQUIRE_ERROR(PlanSave({node}, small), absl::StatusCode::kResourceExhausted,
                       "needs a manifest of about");
  }
  SECTION("alignment") {
    options.alignment = 0;
    CKPT_REQUIRE_ERROR(PlanSave({SingleHost(1)}, options), absl::StatusCode::kInvalidArgument,
                       "alignment 0");
  }
}

}  // namespace
}  // namespace ckpt::planning
