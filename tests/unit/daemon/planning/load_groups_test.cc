// GroupLoadReads: how a load's chunk reads stream through the pool. The
// cases save pattern tensors and objects in memory (PlanSave), plan a
// resharded load for several ranks (PlanLoad), group the reads, and then
// carry the groups out as the load session and the ranks would: each
// group's chunks are read from the saved files into one room, and every
// delivery copies out of the room into its rank's buffer. Checked: each
// stored chunk is read once however many ranks need it; rooms are aligned,
// packed and never overlap; groups stay within batch_bytes (a chunk larger
// than that goes alone) and none is cut short; a delivery reads only its
// chunk's bytes; every requested byte is written exactly once and is right;
// the daemon delivers exactly the requests marked on_device, the ranks
// everything else.
#include "daemon/planning/load_groups.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/planning/load_planner.h"
#include "proto/lib/copy_run.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

constexpr uint64_t kKiB = 1024;
constexpr int kWorld = 4;
constexpr char kGlobalObject[] = "cfg";

uint64_t RoundUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Saved by 4 ranks: a row-split fp32 weight, a flat-split bf16 tensor
// whose last cut is mid-row, a global object on two ranks, a per-rank
// object on each rank and an empty object.
Saved SaveFourRanks() {
  v1::NodeSavePlan node = SingleHost(kWorld, 2);
  const int64_t cut[] = {0, 3001, 6500, 9000, 13000};
  for (int r = 0; r < kWorld; ++r) {
    // [256, 96] fp32: 24 KiB per rank, 6 chunks of 4 KiB.
    AddShard(node, r, BoxShard("w", v1::FLOAT32, {256, 96}, {64 * r, 0}, {64, 96}));
    AddShard(node, r, FlatShard("emb", v1::BFLOAT16, {100, 130}, cut[r], cut[r + 1]));
    *RankOf(node, r).add_objects() = Object("rng", false, 40 + r);
  }
  *RankOf(node, 0).add_objects() = Object(kGlobalObject, true, 5000);
  *RankOf(node, 2).add_objects() = Object(kGlobalObject, true, 5000);
  *RankOf(node, 1).add_objects() = Object("nothing", false, 0);
  return Save({node});
}

// Every rank wants the whole weight (so each of its chunks serves 4 ranks)
// and a different cut of the embedding, the global object and its own
// per-rank object; rank 1 also the empty object.
v1::NodeLoadPlan LoadFourRanks() {
  const v1::TensorShard w = Whole("w", v1::FLOAT32, {256, 96});
  const std::vector<int64_t> emb = {100, 130};
  Requests requests;
  requests[0] = {w, BoxShard("emb", v1::BFLOAT16, emb, {0, 0}, {50, 65})};
  requests[1] = {w, BoxShard("emb", v1::BFLOAT16, emb, {0, 65}, {100, 65})};
  requests[2] = {w, FlatShard("emb", v1::BFLOAT16, emb, 2999, 9001)};
  requests[3] = {w, BoxShard("emb", v1::BFLOAT16, emb, {13, 7}, {71, 111})};
  std::map<int, std::vector<std::string>> objects;
  for (int r = 0; r < kWorld; ++r) objects[r] = {kGlobalObject, "rng"};
  objects[1].push_back("nothing");
  return LoadNode("h0", requests, objects);
}

// Which tensor requests the daemon delivers to a GPU: rank 1's weight and
// rank 2's embedding.
std::vector<std::vector<bool>> OnDevice() {
  std::vector<std::vector<bool>> on_device(kWorld, std::vector<bool>(2, false));
  on_device[1][0] = true;
  on_device[2][1] = true;
  return on_device;
}

struct Buffer {
  std::string expected;
  std::string bytes;
  std::vector<uint8_t> written;  // times each byte was written
  bool on_device = false;
  int host_deliveries = 0;
  int device_deliveries = 0;
};

using Key = std::pair<int, uint32_t>;  // rank, request

// Carries out the groups and checks everything listed at the top.
void CheckGroups(const Saved& saved, const v1::NodeLoadPlan& node,
                 const v1::LoadAssignment& assignment, const std::vector<LoadGroup>& groups,
                 const std::vector<std::vector<bool>>& on_device, uint64_t batch_bytes,
                 uint64_t alignment) {
  // The buffers each rank asked for, and what must land in them.
  std::map<Key, Buffer> tensors;
  std::map<Key, Buffer> objects;
  for (const v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
    for (int i = 0; i < rank.tensors_size(); ++i) {
      Buffer& b = tensors[{rank.rank(), static_cast<uint32_t>(i)}];
      b.expected = PackedBytes(rank.tensors(i));
      b.on_device = on_device[rank.rank()][i];
    }
  }
  for (const v1::ObjectRead& read : assignment.objects()) {
    Buffer& b = objects[{read.rank(), read.request()}];
    const int owner = read.key() == kGlobalObject ? -1 : read.rank();
    b.expected = ObjectBytes(read.key(), owner, read.chunk().length());
  }
  for (auto* buffers : {&tensors, &objects}) {
    for (auto& [key, b] : *buffers) {
      b.bytes.assign(b.expected.size(), '\0');
      b.written.assign(b.expected.size(), 0);
    }
  }

  // The chunks that must be read: every tensor read, and each distinct
  // non-empty object chunk once.
  std::set<std::pair<std::string, uint64_t>> must_read;
  for (const v1::ChunkRead& read : assignment.reads()) {
    must_read.insert({read.chunk().file(), read.chunk().file_offset()});
  }
  for (const v1::ObjectRead& read : assignment.objects()) {
    if (read.chunk().length() > 0) {
      must_read.insert({read.chunk().file(), read.chunk().file_offset()});
    }
  }
  std::set<std::pair<std::string, uint64_t>> read_once;
  size_t tensor_reads_seen = 0;
  bool objects_begun = false;
  std::map<const v1::StoredChunk*, const v1::ChunkRead*> read_of;
  for (const v1::ChunkRead& read : assignment.reads()) read_of[&read.chunk()] = &read;
  // Packing order (file, then offset of each group's first chunk): no group
  // was cut short, i.e. the next one's first chunk did not fit.
  std::vector<size_t> packed;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (read_of.count(groups[g].chunks.front().chunk) > 0) packed.push_back(g);
  }
  auto first = [&](size_t g) {
    const v1::StoredChunk& c = *groups[g].chunks.front().chunk;
    return std::make_pair(c.file(), c.file_offset());
  };
  std::sort(packed.begin(), packed.end(), [&](size_t a, size_t b) { return first(a) < first(b); });
  for (size_t i = 0; i + 1 < packed.size(); ++i) {
    const LoadGroup& group = groups[packed[i]];
    CHECK(group.room_bytes + RoundUp(groups[packed[i + 1]].chunks[0].chunk->length(), alignment) >
          batch_bytes);
  }
  // Files take turns: the tensor groups come first, and the first round of
  // them starts in every file that starts a group, one each.
  std::set<std::string> starting;
  for (size_t g : packed) starting.insert(groups[g].chunks.front().chunk->file());
  std::set<std::string> first_round;
  for (size_t g = 0; g < starting.size(); ++g) {
    first_round.insert(groups[g].chunks.front().chunk->file());
  }
  CHECK(first_round == starting);

  for (size_t g = 0; g < groups.size(); ++g) {
    const LoadGroup& group = groups[g];
    INFO("group " << g << " of " << groups.size());
    REQUIRE_FALSE(group.chunks.empty());
    REQUIRE(group.host.size() == static_cast<size_t>(kWorld));
    // Room: aligned, packed in order, so no two chunks overlap.
    uint64_t room = 0;
    for (const GroupChunk& c : group.chunks) {
      CHECK(c.room_offset % alignment == 0);
      CHECK(c.room_offset == room);
      room += RoundUp(c.chunk->length(), alignment);
    }
    CHECK(group.room_bytes == room);
    CHECK((group.room_bytes <= batch_bytes || group.chunks.size() == 1));

    // Read: each chunk's file bytes at its room offset; the pad stays junk.
    std::string pool(group.room_bytes, '\x5a');
    for (const GroupChunk& c : group.chunks) {
      INFO(c.owner << ": " << c.chunk->ShortDebugString());
      CHECK(c.chunk->length() > 0);
      REQUIRE(read_once.insert({c.chunk->file(), c.chunk->file_offset()}).second);
      CHECK(must_read.count({c.chunk->file(), c.chunk->file_offset()}) == 1);
      // Tensor chunks first, then objects.
      auto read = read_of.find(c.chunk);
      if (read != read_of.end()) {
        CHECK_FALSE(objects_begun);
        ++tensor_reads_seen;
        CHECK(c.owner == "tensor " + read->second->fqn());
      } else {
        objects_begun = true;
        CHECK(c.owner.rfind("object ", 0) == 0);
      }
      const std::string& file = saved.files.at(c.chunk->file());
      REQUIRE(c.chunk->file_offset() + c.chunk->length() <= file.size());
      pool.replace(c.room_offset, c.chunk->length(), file, c.chunk->file_offset(),
                   c.chunk->length());
    }

    // Copy out. A delivery may read only its own chunk's bytes.
    auto deliver = [&](int rank, const v1::Delivery& d, bool by_daemon) {
      INFO("rank " << rank << " " << d.ShortDebugString());
      std::map<Key, Buffer>& buffers = d.target() == v1::Delivery::OBJECT ? objects : tensors;
      auto it = buffers.find({rank, d.request()});
      REQUIRE(it != buffers.end());
      Buffer& b = it->second;
      (by_daemon ? b.device_deliveries : b.host_deliveries) += 1;
      const uint64_t n = d.count() <= 1 ? 1 : d.count();
      for (uint64_t k = 0; k < n; ++k) {
        const uint64_t src = d.pool_offset() + k * d.src_stride();
        const uint64_t dst = d.dest_offset() + k * d.dest_stride();
        bool inside_a_chunk = false;
        for (const GroupChunk& c : group.chunks) {
          inside_a_chunk |=
              src >= c.room_offset && src + d.length() <= c.room_offset + c.chunk->length();
        }
        REQUIRE(inside_a_chunk);
        REQUIRE(dst + d.length() <= b.bytes.size());
        b.bytes.replace(dst, d.length(), pool, src, d.length());
        for (uint64_t i = dst; i < dst + d.length(); ++i) ++b.written[i];
      }
    };
    for (int rank = 0; rank < kWorld; ++rank) {
      for (const v1::Delivery& d : group.host[rank]) deliver(rank, d, /*by_daemon=*/false);
    }
    for (const DeviceCopy& copy : group.device) {
      CHECK(copy.delivery.target() == v1::Delivery::TENSOR);
      CHECK(copy.delivery.request() == copy.request);
      deliver(copy.rank, copy.delivery, /*by_daemon=*/true);
    }
  }
  CHECK(tensor_reads_seen == static_cast<size_t>(assignment.reads_size()));
  CHECK(read_once == must_read);

  for (auto* buffers : {&tensors, &objects}) {
    for (const auto& [key, b] : *buffers) {
      INFO("rank " << key.first << (buffers == &objects ? " object " : " tensor ") << key.second);
      uint64_t not_once = 0;
      uint64_t wrong = 0;
      for (size_t i = 0; i < b.bytes.size(); ++i) {
        not_once += b.written[i] != 1;
        wrong += b.bytes[i] != b.expected[i];
      }
      CHECK(not_once == 0);
      CHECK(wrong == 0);
      if (b.on_device) {
        CHECK(b.host_deliveries == 0);
      } else {
        CHECK(b.device_deliveries == 0);
      }
    }
  }
}

TEST_CASE("load groups: a resharded load through groups of several sizes", "[load_groups]") {
  const Saved saved = SaveFourRanks();
  const v1::NodeLoadPlan node = LoadFourRanks();
  absl::StatusOr<v1::LoadAssignment> assignment = planning::PlanLoad(saved.manifest, {node});
  CKPT_REQUIRE_OK(assignment);
  // The weight's chunks serve all four ranks, yet each is read once.
  size_t shared = 0;
  for (const v1::ChunkRead& read : assignment->reads()) {
    std::set<int> ranks;
    for (const v1::CopyRun& run : read.runs()) {
      ForEachRunRank(run, [&](int rank) { ranks.insert(rank); });
    }
    shared += ranks.size() == static_cast<size_t>(kWorld);
  }
  CHECK(shared >= 24);
  const std::vector<std::vector<bool>> on_device = OnDevice();
  for (uint64_t alignment : {uint64_t{512}, 4 * kKiB}) {
    for (uint64_t batch : {uint64_t{1}, 4 * kKiB, 12 * kKiB + 1, 64 * kKiB, uint64_t{1} << 30}) {
      INFO("alignment " << alignment << ", batch_bytes " << batch);
      const std::vector<LoadGroup> groups =
          GroupLoadReads(*assignment, kWorld, on_device, batch, alignment);
      CheckGroups(saved, node, *assignment, groups, on_device, batch, alignment);
      if (batch == 1) {
        for (const LoadGroup& group : groups) CHECK(group.chunks.size() == 1);
      }
      if (batch == uint64_t{1} << 30) CHECK(groups.size() == 1);
    }
  }
}

v1::StoredChunk Chunk(uint64_t file_offset, uint64_t length) {
  v1::StoredChunk c;
  c.set_file("data/h0-0.bin");
  c.set_file_offset(file_offset);
  c.set_length(length);
  return c;
}

v1::CopyRun Run(int rank, uint32_t request, uint64_t chunk_offset, uint64_t length) {
  v1::CopyRun run;
  run.set_rank(rank);
  run.set_request(request);
  run.set_chunk_offset(chunk_offset);
  run.set_length(length);
  return run;
}

TEST_CASE("load groups: exact layout of a small assignment", "[load_groups]") {
  v1::LoadAssignment assignment;
  v1::ChunkRead* a = assignment.add_reads();  // 100 B, wanted by ranks 0 and 2 (and a bogus 7)
  *a->mutable_chunk() = Chunk(0, 100);
  a->set_fqn("a");
  *a->add_runs() = Run(0, 0, 0, 100);
  *a->add_runs() = Run(2, 0, 10, 50);
  *a->add_runs() = Run(7, 0, 0, 100);         // outside the world: dropped, not a crash
  v1::ChunkRead* b = assignment.add_reads();  // 5000 B, one strided run
  *b->mutable_chunk() = Chunk(4096, 5000);
  b->set_fqn("b");
  v1::CopyRun strided = Run(1, 0, 0, 8);
  strided.set_count(2);
  strided.set_chunk_stride(16);
  strided.set_dest_stride(8);
  *b->add_runs() = strided;
  v1::ChunkRead* c = assignment.add_reads();  // 4096 B
  *c->mutable_chunk() = Chunk(12288, 4096);
  c->set_fqn("c");
  *c->add_runs() = Run(3, 1, 0, 4096);
  for (int rank : {0, 3}) {  // one global object, two ranks
    v1::ObjectRead* o = assignment.add_objects();
    o->set_rank(rank);
    o->set_request(0);
    o->set_key("cfg");
    *o->mutable_chunk() = Chunk(16384, 300);
  }
  v1::ObjectRead* empty = assignment.add_objects();
  empty->set_rank(1);
  empty->set_request(0);
  empty->set_key("empty");
  *empty->mutable_chunk() = Chunk(20480, 0);

  std::vector<std::vector<bool>> on_device(kWorld, std::vector<bool>(2, false));
  on_device[2][0] = true;
  const std::vector<LoadGroup> groups =
      GroupLoadReads(assignment, kWorld, on_device, 8 * kKiB, 4 * kKiB);

  // [a] [b, which takes 8 KiB aligned] [c, cfg]; the empty object reads nothing.
  REQUIRE(groups.size() == 3);
  REQUIRE(groups[0].chunks.size() == 1);
  CHECK(groups[0].room_bytes == 4 * kKiB);
  CHECK(groups[0].chunks[0].owner == "tensor a");
  REQUIRE(groups[0].host[0].size() == 1);
  CHECK(groups[0].host[0][0].pool_offset() == 0);
  CHECK(groups[0].host[0][0].length() == 100);
  CHECK(groups[0].host[2].empty());  // rank 2's request goes to its GPU
  REQUIRE(groups[0].device.size() == 1);
  CHECK(groups[0].device[0].rank == 2);
  CHECK(groups[0].device[0].delivery.pool_offset() == 10);
  CHECK(groups[0].device[0].delivery.length() == 50);

  REQUIRE(groups[1].chunks.size() == 1);
  CHECK(groups[1].room_bytes == 8 * kKiB);
  REQUIRE(groups[1].host[1].size() == 1);
  const v1::Delivery& d = groups[1].host[1][0];
  CHECK(d.count() == 2);
  CHECK(d.src_stride() == 16);
  CHECK(d.dest_stride() == 8);

  REQUIRE(groups[2].chunks.size() == 2);
  CHECK(groups[2].chunks[1].owner == "object cfg");
  CHECK(groups[2].chunks[1].room_offset == 4 * kKiB);
  CHECK(groups[2].room_bytes == 8 * kKiB);
  REQUIRE(groups[2].host[0].size() == 1);
  CHECK(groups[2].host[0][0].target() == v1::Delivery::OBJECT);
  CHECK(groups[2].host[0][0].pool_offset() == 4 * kKiB);
  REQUIRE(groups[2].host[3].size() == 2);
  CHECK(groups[2].host[3][0].target() == v1::Delivery::TENSOR);
  CHECK(groups[2].host[3][0].request() == 1);
  CHECK(groups[2].host[3][1].target() == v1::Delivery::OBJECT);
  CHECK(groups[2].host[3][1].pool_offset() == 4 * kKiB);
  CHECK(groups[2].host[3][1].length() == 300);
  int empty_deliveries = 0;
  for (const LoadGroup& group : groups) {
    for (const v1::Delivery& delivery : group.host[1]) {
      empty_deliveries += delivery.target() == v1::Delivery::OBJECT;
    }
  }
  CHECK(empty_deliveries == 0);
}

}  // namespace
}  // namespace ckpt::planning
