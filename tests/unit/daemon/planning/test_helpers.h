// Helpers shared by the coordinator and server tests: plan builders, an
// independent (brute-force) model of regions, a byte pattern per global
// element so that any misplaced byte shows up, and a save carried out in
// memory to load from.
#ifndef CKPT_TESTS_UNIT_DAEMON_COORDINATOR_TEST_HELPERS_H_
#define CKPT_TESTS_UNIT_DAEMON_COORDINATOR_TEST_HELPERS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_planner.h"
#include "proto/lib/crc32c.h"
#include "tests/catch.h"

namespace ckpt::planning::testing {

// The manifest of a one-tensor checkpoint: UINT8 [size], in chunks of at
// most chunk_bytes, in data/h0-0.bin.
inline v1::CheckpointManifest ManifestOf(const std::string& job, int64_t step,
                                         const std::string& data, uint64_t chunk_bytes) {
  v1::CheckpointManifest m;
  m.set_format_version(1);
  m.set_job(job);
  m.set_step(step);
  m.set_created_unix_ms(1000 + step);
  v1::TensorEntry* t = m.add_tensors();
  t->set_fqn("w");
  t->set_dtype(v1::UINT8);
  t->add_global_shape(static_cast<int64_t>(data.size()));
  v1::StoredShard* shard = t->add_shards();
  for (uint64_t off = 0; off < data.size(); off += chunk_bytes) {
    const uint64_t len = std::min<uint64_t>(chunk_bytes, data.size() - off);
    v1::StoredChunk* c = shard->add_chunks();
    c->set_file("data/h0-0.bin");
    c->set_file_offset(off);
    c->set_shard_offset(off);
    c->set_length(len);
    c->set_crc32c(Crc32c(data.data() + off, len));
  }
  return m;
}

inline absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

#define CKPT_REQUIRE_OK(expr)                                                    \
  do {                                                                           \
    const absl::Status ckpt_status_ = ::ckpt::planning::testing::ToStatus(expr); \
    INFO(ckpt_status_.ToString());                                               \
    REQUIRE(ckpt_status_.ok());                                                  \
  } while (0)

// Requires `expr` to fail with `code` and a message containing every part.
#define CKPT_REQUIRE_ERROR(expr, expected_code, ...)                                    \
  do {                                                                                  \
    const absl::Status ckpt_status_ = ::ckpt::planning::testing::ToStatus(expr);        \
    INFO(ckpt_status_.ToString());                                                      \
    REQUIRE(ckpt_status_.code() == (expected_code));                                    \
    for (const std::string& ckpt_part_ : std::vector<std::string>{__VA_ARGS__}) {       \
      INFO("expected in message: " << ckpt_part_);                                      \
      CHECK(std::string(ckpt_status_.message()).find(ckpt_part_) != std::string::npos); \
    }                                                                                   \
  } while (0)

inline int64_t ElementSize(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT64:
    case v1::INT64:
      return 8;
    case v1::FLOAT32:
    case v1::INT32:
      return 4;
    case v1::FLOAT16:
    case v1::BFLOAT16:
    case v1::INT16:
      return 2;
    default:
      return 1;
  }
}

inline v1::TensorShard Whole(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape) {
  v1::TensorShard s;
  s.set_fqn(fqn);
  s.set_dtype(dtype);
  for (int64_t d : shape) s.add_global_shape(d);
  return s;
}

inline v1::TensorShard BoxShard(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape,
                                std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
  v1::TensorShard s = Whole(fqn, dtype, std::move(shape));
  v1::Box* box = s.mutable_region()->mutable_box();
  for (int64_t o : offsets) box->add_offsets(o);
  for (int64_t l : lengths) box->add_lengths(l);
  return s;
}

inline v1::TensorShard FlatShard(const std::string& fqn, v1::DType dtype,
                                 std::vector<int64_t> shape, int64_t begin, int64_t end) {
  v1::TensorShard s = Whole(fqn, dtype, std::move(shape));
  s.mutable_region()->mutable_flat()->set_begin(begin);
  s.mutable_region()->mutable_flat()->set_end(end);
  return s;
}

inline v1::ObjectDesc Object(const std::string& key, bool global, uint64_t length) {
  v1::ObjectDesc o;
  o.set_key(key);
  o.set_global(global);
  o.set_length(length);
  return o;
}

// One host with ranks [first_rank, first_rank + n), no shards yet.
inline v1::NodeSavePlan Node(const std::string& host, int world_size, int writer_threads,
                             std::vector<int> ranks, const std::string& job = "job",
                             int64_t step = 5) {
  v1::NodeSavePlan node;
  node.mutable_host()->set_host(host);
  node.set_job(job);
  node.set_step(step);
  node.set_world_size(world_size);
  node.set_writer_threads(writer_threads);
  for (int r : ranks) node.add_ranks()->set_rank(r);
  return node;
}

inline v1::NodeSavePlan SingleHost(int world_size, int writer_threads = 1) {
  std::vector<int> ranks;
  for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  return Node("h0", world_size, writer_threads, ranks);
}

// The RankSavePlan of `rank` inside node.
inline v1::RankSavePlan& RankOf(v1::NodeSavePlan& node, int rank) {
  for (v1::RankSavePlan& r : *node.mutable_ranks()) {
    if (r.rank() == rank) return r;
  }
  FAIL("rank " << rank << " is not in the node");
  throw 0;  // unreachable
}

inline void AddShard(v1::NodeSavePlan& node, int rank, const v1::TensorShard& shard) {
  *RankOf(node, rank).add_shards() = shard;
}

// The save planner's options with small chunks, so that shards of a few
// KiB are several chunks.
inline SavePlannerOptions PlannerOptions(uint64_t chunk_bytes = 4096) {
  SavePlannerOptions o;
  o.chunk_bytes = chunk_bytes;
  o.alignment = 4096;
  return o;
}

inline int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The global (flattened) indices of the region's elements, ascending,
// computed by brute force over the whole tensor: independent of geometry.cc.
inline std::vector<int64_t> RegionElements(const v1::TensorShard& shard) {
  const std::vector<int64_t> shape(shard.global_shape().begin(), shard.global_shape().end());
  const int64_t n = NumElements(shape);
  std::vector<int64_t> out;
  for (int64_t e = 0; e < n; ++e) {
    bool in = true;
    switch (shard.region().kind_case()) {
      case v1::Region::kBox: {
        // e's index along each dimension, innermost first.
        int64_t rest = e;
        for (size_t d = shape.size(); d-- > 0;) {
          const int64_t index = rest % shape[d];
          rest /= shape[d];
          const int64_t o = shard.region().box().offsets(static_cast<int>(d));
          const int64_t l = shard.region().box().lengths(static_cast<int>(d));
          if (index < o || index >= o + l) in = false;
        }
        break;
      }
      case v1::Region::kFlat:
        in = e >= shard.region().flat().begin() && e < shard.region().flat().end();
        break;
      default:
        break;
    }
    if (in) out.push_back(e);
  }
  return out;
}

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Byte b of global element e of the tensor seeded by `seed`.
inline char PatternByte(uint64_t seed, int64_t e, int64_t b) {
  return static_cast<char>(
      Mix(seed * 0x100000001b3ULL + static_cast<uint64_t>(e) * 16 + static_cast<uint64_t>(b)) &
      0xff);
}

inline uint64_t SeedOf(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

// The packed (row-major, gap-free) bytes of a shard of the pattern tensor.
inline std::string PackedBytes(const v1::TensorShard& shard) {
  const int64_t size = ElementSize(shard.dtype());
  const uint64_t seed = SeedOf(shard.fqn());
  std::string out;
  for (int64_t e : RegionElements(shard)) {
    for (int64_t b = 0; b < size; ++b) out.push_back(PatternByte(seed, e, b));
  }
  return out;
}

// The bytes of an object of `key` held by `rank` (-1: global).
inline std::string ObjectBytes(const std::string& key, int rank, uint64_t length) {
  std::string out;
  const uint64_t seed = SeedOf(key) + static_cast<uint64_t>(rank + 7);
  for (uint64_t i = 0; i < length; ++i)
    out.push_back(PatternByte(seed, static_cast<int64_t>(i), 0));
  return out;
}

// A save carried out in memory: PlanSave's assignment, its manifest with
// arbitrary distinct CRCs, and the data files as the writers would leave
// them (each item's pattern bytes at its file offset).
struct Saved {
  v1::SaveAssignment assignment;
  v1::CheckpointManifest manifest;           // template with CRCs filled in
  std::map<std::string, std::string> files;  // data file -> contents
};

inline const v1::RankSavePlan& FindRank(const v1::NodeSavePlan& node, int rank) {
  for (const v1::RankSavePlan& r : node.ranks()) {
    if (r.rank() == rank) return r;
  }
  FAIL("rank " << rank << " not in host " << node.host().host());
  throw 0;
}

// Plans the save and performs the writes the assignment asks for.
inline Saved Save(const std::vector<v1::NodeSavePlan>& nodes, uint64_t chunk_bytes = 4096) {
  SavePlannerOptions options;
  options.chunk_bytes = chunk_bytes;
  absl::StatusOr<v1::SaveAssignment> a = PlanSave(nodes, options);
  CKPT_REQUIRE_OK(a);
  Saved saved;
  saved.assignment = *a;
  REQUIRE(a->hosts_size() == static_cast<int>(nodes.size()));
  for (size_t h = 0; h < nodes.size(); ++h) {
    for (const v1::WriteItem& item : a->hosts(static_cast<int>(h)).items()) {
      const v1::RankSavePlan& rank = FindRank(nodes[h], item.rank());
      std::string bytes;
      if (item.is_object()) {
        const v1::ObjectDesc& o = rank.objects(static_cast<int>(item.index()));
        bytes = ObjectBytes(o.key(), o.global() ? -1 : item.rank(), o.length());
      } else {
        bytes = PackedBytes(rank.shards(static_cast<int>(item.index())));
      }
      REQUIRE(bytes.size() == item.bytes());
      std::string& file = saved.files[a->hosts(static_cast<int>(h)).files(item.writer())];
      if (file.size() < item.file_offset() + bytes.size()) {
        file.resize(item.file_offset() + bytes.size(), '\xee');
      }
      file.replace(item.file_offset(), bytes.size(), bytes);
    }
  }
  // Arbitrary, distinct CRCs: the planner must carry them through untouched.
  saved.manifest = planning::ManifestOf(*a);
  uint32_t crc = 0x1234567;
  for (v1::TensorEntry& t : *saved.manifest.mutable_tensors()) {
    for (v1::StoredShard& s : *t.mutable_shards()) {
      for (v1::StoredChunk& c : *s.mutable_chunks()) c.set_crc32c(crc += 0x9e3779b1);
    }
  }
  for (v1::ObjectEntry& o : *saved.manifest.mutable_objects()) {
    o.mutable_chunk()->set_crc32c(crc += 0x9e3779b1);
  }
  return saved;
}

using Requests = std::map<int, std::vector<v1::TensorShard>>;  // rank -> requests

inline v1::NodeLoadPlan LoadNode(const std::string& host, const Requests& requests,
                                 const std::map<int, std::vector<std::string>>& objects = {}) {
  v1::NodeLoadPlan node;
  node.mutable_host()->set_host(host);
  node.set_job("job");
  node.set_step(5);
  std::set<int> ranks;
  for (const auto& [r, _] : requests) ranks.insert(r);
  for (const auto& [r, _] : objects) ranks.insert(r);
  for (int r : ranks) {
    v1::NodeLoadPlan::RankRequests* rr = node.add_ranks();
    rr->set_rank(r);
    if (auto it = requests.find(r); it != requests.end()) {
      for (const v1::TensorShard& s : it->second) *rr->add_tensors() = s;
    }
    if (auto it = objects.find(r); it != objects.end()) {
      for (const std::string& k : it->second) rr->add_object_keys(k);
    }
  }
  return node;
}

}  // namespace ckpt::planning::testing

#endif  // CKPT_TESTS_UNIT_DAEMON_COORDINATOR_TEST_HELPERS_H_
