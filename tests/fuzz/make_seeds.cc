// Writes the fuzzers' seed corpora (tests/fuzz/corpus/<target>/): real
// saves and loads in the layouts trainers use (tensor- and data-parallel
// boxes, FSDP flat ranges, column splits, a 0-d scalar, empty tensors and
// objects, a partial save, tensors of several chunks), each run through the
// same path as the fuzzers so that every seed is accepted, and the MANIFEST
// files those saves commit.
//
//   build-fuzz/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/codec/chunk_codec.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "daemon/planning/node_save_plan.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/replica_placement.h"
#include "proto/lib/compact_plan.h"
#include "tests/fuzz/fuzz_support.h"

namespace ckpt::fuzz {
namespace {

[[noreturn]] void Refused(const std::string& seed, const absl::Status& status);

// The manifest as the writers would commit it with a codec and step deltas
// (docs/compression.md): every chunk grouped-zstd, every other tensor chunk
// a delta against the step before; it must still validate.
v1::CheckpointManifest EncodedWithDeltas(v1::CheckpointManifest m) {
  const bool deltas = m.step() > 0;
  if (deltas) {
    m.set_delta_base_step(m.step() - 1);
    m.set_delta_ordinal(1);
  }
  int n = 0;
  auto encode = [](v1::StoredChunk& c) {
    c.set_codec(v1::CHUNK_CODEC_GROUPED_ZSTD);
    c.set_stored_length(std::max<uint64_t>(1, c.length() / 2));
    c.set_element_bytes(4);
  };
  for (v1::TensorEntry& t : *m.mutable_tensors()) {
    for (v1::StoredShard& s : *t.mutable_shards()) {
      for (v1::StoredChunk& c : *s.mutable_chunks()) {
        encode(c);
        if (deltas && n++ % 2 == 1) {
          const v1::StoredChunk base = c;
          c.set_delta_base_step(m.step() - 1);
          *c.mutable_delta_base() = base;
        }
      }
    }
  }
  for (v1::ObjectEntry& o : *m.mutable_objects()) {
    if (o.chunk().length() > 0) encode(*o.mutable_chunk());
  }
  if (absl::Status s = planning::ValidateManifest(m, m.job(), m.step(), "the encoded seed");
      !s.ok()) {
    Refused("multichunk_encoded_deltas", s);
  }
  return m;
}

v1::TensorShard Whole(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape) {
  v1::TensorShard s;
  s.set_fqn(fqn);
  s.set_dtype(dtype);
  for (int64_t d : shape) s.add_global_shape(d);
  return s;
}

v1::TensorShard Box(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape,
                    std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
  v1::TensorShard s = Whole(fqn, dtype, std::move(shape));
  for (int64_t o : offsets) s.mutable_region()->mutable_box()->add_offsets(o);
  for (int64_t l : lengths) s.mutable_region()->mutable_box()->add_lengths(l);
  return s;
}

v1::TensorShard Flat(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape,
                     int64_t begin, int64_t end) {
  v1::TensorShard s = Whole(fqn, dtype, std::move(shape));
  s.mutable_region()->mutable_flat()->set_begin(begin);
  s.mutable_region()->mutable_flat()->set_end(end);
  return s;
}

v1::ObjectDesc Object(const std::string& key, uint64_t length, bool global = false) {
  v1::ObjectDesc o;
  o.set_key(key);
  o.set_length(length);
  o.set_global(global);
  return o;
}

SaveCase NewSave(const std::string& job, int world, int64_t step) {
  SaveCase c;
  c.mutable_attach()->set_job(job);
  c.mutable_attach()->set_world_size(world);
  for (int r = 0; r < world; ++r) c.add_ranks()->set_step(step);
  return c;
}

std::map<std::string, SaveCase> Saves() {
  std::map<std::string, SaveCase> saves;
  {  // One rank: a matrix, a 0-d scalar, a per-rank and a global object.
    SaveCase c = NewSave("train", 1, 100);
    v1::PlanSaveRequest& r = *c.mutable_ranks(0);
    *r.add_shards() = Whole("w", v1::FLOAT32, {4, 8});
    *r.add_shards() = Whole("scalar", v1::FLOAT32, {});
    *r.add_objects() = Object("rng", 16);
    *r.add_objects() = Object("config", 100, true);
    // One entry: maps serialize in no fixed order, and seeds should not churn.
    (*r.mutable_user_metadata())["model"] = "fuzz";
    saves["single"] = c;
  }
  {  // Tensor-parallel rows, a data-parallel replica, objects of each kind.
    SaveCase c = NewSave("llm", 2, 7);
    for (int rank = 0; rank < 2; ++rank) {
      v1::PlanSaveRequest& r = *c.mutable_ranks(rank);
      *r.add_shards() = Box("layer.0.weight", v1::BFLOAT16, {8, 16}, {4 * rank, 0}, {4, 16});
      *r.add_shards() = Whole("layer.0.bias", v1::FLOAT32, {16});
      *r.add_objects() = Object("optim", 64);
      *r.add_objects() = Object("config", 10, true);
    }
    saves["tp_dp"] = c;
  }
  {  // FSDP flat ranges, column boxes, an empty tensor.
    SaveCase c = NewSave("fsdp", 4, 3);
    for (int rank = 0; rank < 4; ++rank) {
      v1::PlanSaveRequest& r = *c.mutable_ranks(rank);
      *r.add_shards() = Flat("emb", v1::FLOAT32, {10, 10}, 25 * rank, 25 * (rank + 1));
      *r.add_shards() = Box("head", v1::FLOAT16, {6, 4}, {0, rank}, {6, 1});
    }
    *c.mutable_ranks(0)->add_shards() = Whole("empty", v1::FLOAT32, {0, 5});
    saves["fsdp"] = c;
  }
  {  // A tensor of six 4 MiB chunks in flat ranges that cut its rows, and
     // an empty object.
    SaveCase c = NewSave("big", 3, 1);
    const int64_t row = int64_t{1} << 21;
    const std::vector<int64_t> cuts = {0, row + 100, 2 * row, 3 * row};
    for (int rank = 0; rank < 3; ++rank) {
      *c.mutable_ranks(rank)->add_shards() =
          Flat("big", v1::FLOAT32, {3, row}, cuts[rank], cuts[rank + 1]);
    }
    *c.mutable_ranks(0)->add_objects() = Object("empty", 0);
    saves["multichunk"] = c;
  }
  {  // A partial save: two row blocks of the tensor.
    SaveCase c = NewSave("part", 2, 5);
    for (int rank = 0; rank < 2; ++rank) {
      v1::PlanSaveRequest& r = *c.mutable_ranks(rank);
      r.set_partial(true);
      *r.add_shards() = Box("part", v1::FLOAT32, {8, 8}, {4 * rank, 0}, {2, 8});
    }
    saves["partial"] = c;
  }
  return saves;
}

LoadCase NewLoad(const SaveCase& save, int world) {
  LoadCase c;
  *c.mutable_save() = save;
  c.mutable_load_attach()->set_job(save.attach().job());
  c.mutable_load_attach()->set_world_size(world);
  for (int r = 0; r < world; ++r) c.add_ranks()->set_step(-1);
  return c;
}

std::map<std::string, LoadCase> Loads(std::map<std::string, SaveCase>& saves) {
  std::map<std::string, LoadCase> loads;
  {  // Rows saved, columns loaded by three ranks; objects.
    LoadCase c = NewLoad(saves["tp_dp"], 3);
    const int64_t cols[] = {0, 5, 10, 16};
    for (int rank = 0; rank < 3; ++rank) {
      v1::LoadRequest& r = *c.mutable_ranks(rank);
      *r.add_tensors() = Box("layer.0.weight", v1::BFLOAT16, {8, 16}, {0, cols[rank]},
                             {8, cols[rank + 1] - cols[rank]});
      *r.add_tensors() = Whole("layer.0.bias", v1::FLOAT32, {16});
    }
    c.mutable_ranks(0)->add_object_keys("config");
    c.mutable_ranks(1)->add_object_keys("optim");
    loads["rows_to_columns"] = c;
  }
  {  // Flat ranges across chunks loaded as column halves: strided runs.
    LoadCase c = NewLoad(saves["multichunk"], 2);
    const int64_t row = int64_t{1} << 21;
    for (int rank = 0; rank < 2; ++rank) {
      *c.mutable_ranks(rank)->add_tensors() =
          Box("big", v1::FLOAT32, {3, row}, {0, rank * row / 2}, {3, row / 2});
    }
    c.mutable_ranks(0)->add_object_keys("empty");
    loads["columns_across_chunks"] = c;
  }
  {  // Everything by one rank, one on a GPU.
    LoadCase c = NewLoad(saves["fsdp"], 1);
    v1::LoadRequest& r = *c.mutable_ranks(0);
    *r.add_tensors() = Whole("emb", v1::FLOAT32, {10, 10});
    *r.add_tensors() = Whole("head", v1::FLOAT16, {6, 4});
    r.mutable_tensors(1)->mutable_device_buffer()->set_allocation_bytes(1 << 20);
    *r.add_tensors() = Whole("empty", v1::FLOAT32, {0, 5});
    loads["one_rank"] = c;
  }
  {  // The stored part of a partial save.
    LoadCase c = NewLoad(saves["partial"], 1);
    *c.mutable_ranks(0)->add_tensors() = Box("part", v1::FLOAT32, {8, 8}, {4, 0}, {2, 8});
    loads["partial"] = c;
  }
  {  // A flat range of a matrix, a scalar, per-rank and global objects.
    LoadCase c = NewLoad(saves["single"], 2);
    *c.mutable_ranks(0)->add_tensors() = Flat("w", v1::FLOAT32, {4, 8}, 3, 29);
    *c.mutable_ranks(0)->add_tensors() = Whole("scalar", v1::FLOAT32, {});
    c.mutable_ranks(0)->add_object_keys("rng");
    c.mutable_ranks(1)->add_object_keys("config");
    loads["flat_and_objects"] = c;
  }
  return loads;
}

// The save's ranks on two hosts (even and odd ranks), as their node
// daemons send them (compact) or spelled out.
ClusterCase ClusterOf(const SaveCase& save, const std::vector<v1::PlanSaveRequest>& requests,
                      bool compact) {
  ClusterCase out;
  const int world = save.attach().world_size();
  for (int parity = 0; parity < std::min(2, world); ++parity) {
    planning::RankRequests ranks;
    for (int r = parity; r < world; r += 2) ranks[r] = &requests[r];
    v1::HostIdentity host;
    host.set_host(absl::StrCat("h", parity));
    v1::NodeSavePlan* plan = out.add_hosts();
    *plan =
        planning::BatchRankPlans(host, save.attach().job(), requests[0].step(), world, 2, ranks);
    if (compact) continue;
    plan->clear_compact();
    plan->clear_tensors();
    plan->clear_regions();
    for (v1::RankSavePlan& rank : *plan->mutable_ranks()) {
      rank.clear_shard_tensors();
      rank.clear_shard_regions();
      *rank.mutable_shards() = requests[rank.rank()].shards();
    }
  }
  return out;
}

// The load's ranks on two hosts (even and odd ranks), compact as
// LoadSession sends them or spelled out.
void AddLoads(const std::vector<v1::LoadRequest>& ranks, bool compact, ClusterCase& out) {
  const int world = static_cast<int>(ranks.size());
  for (int parity = 0; parity < std::min(2, world); ++parity) {
    v1::NodeLoadPlan* plan = out.add_loads();
    plan->mutable_host()->set_host(absl::StrCat("h", parity));
    plan->set_world_size(world);
    std::optional<CompactShardsBuilder> builder;
    if (compact) builder.emplace(*plan);
    for (int r = parity; r < world; r += 2) {
      v1::NodeLoadPlan::RankRequests* rank = plan->add_ranks();
      rank->set_rank(r);
      *rank->mutable_object_keys() = ranks[r].object_keys();
      if (builder) {
        builder->AddRequests(ranks[r].tensors(), *rank);
      } else {
        *rank->mutable_tensors() = ranks[r].tensors();
      }
    }
  }
}

void Write(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out.good()) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

[[noreturn]] void Refused(const std::string& seed, const absl::Status& status) {
  std::fprintf(stderr, "seed %s is refused: %s\n", seed.c_str(), status.ToString().c_str());
  std::exit(1);
}

// fuzz_memory_plans: the save's replica plans (R=1) and stripes (k = hosts
// - 1, m = 1) as the coordinator would send them to its first host, after
// 4 bytes naming the hosts lost (none, then the first).
void WriteMemoryPlanSeeds(const std::filesystem::path& root, const std::string& name,
                          const std::vector<v1::NodeSavePlan>& hosts) {
  if (hosts.size() < 2) return;
  absl::StatusOr<v1::SaveAssignment> saved = planning::PlanSave(hosts, DaemonPlannerOptions());
  if (!saved.ok()) Refused(name, saved.status());
  std::map<std::string, std::shared_ptr<const v1::HostAssignment>> parts;
  std::map<std::string, std::string> addresses;
  for (const v1::HostAssignment& h : saved->hosts()) {
    parts[h.host().host()] = std::make_shared<v1::HostAssignment>(h);
    addresses[h.host().host()] = "127.0.0.1:1";
  }
  const std::string secret(16, 's');
  auto replicas = planning::PlaceReplicas(parts, addresses, 1, 7, secret);
  auto erasure =
      planning::PlaceErasure(parts, addresses, static_cast<int>(parts.size()) - 1, 1, 7, secret);
  if (!replicas.ok()) Refused(name, replicas.status());
  if (!erasure.ok()) Refused(name, erasure.status());
  v1::SaveAssignment seed;
  *seed.mutable_replicas() = replicas->begin()->second;
  *seed.mutable_erasure() = erasure->whole;
  for (const char lost : {'\0', '\1'}) {
    Write(root / "fuzz_memory_plans" / absl::StrCat(name, lost == 0 ? "" : "_lost", ".pb"),
          std::string(1, lost) + std::string(3, '\0') + seed.SerializeAsString());
  }
}

// Stored chunks of each codec as fuzz_chunk_codec reads them: codec byte,
// element size - 1, recorded raw length (little-endian), stored bytes.
void WriteCodecSeeds(const std::filesystem::path& root) {
  std::string floats(4096, '\0');
  for (size_t i = 0; i < floats.size(); i += 4) {
    const float f = 0.001f * static_cast<float>(i % 97) - 0.05f;
    std::memcpy(floats.data() + i, &f, 4);
  }
  for (codec::Codec c : {codec::Codec::kNone, codec::Codec::kZstd, codec::Codec::kGroupedZstd}) {
    std::string stored;
    absl::StatusOr<codec::Codec> used =
        codec::EncodeChunk(c, 4, absl::MakeConstSpan(floats.data(), floats.size()),
                           {.level = 1, .min_saving = 0.0}, &stored);
    if (!used.ok() || *used != c) std::abort();
    if (c == codec::Codec::kNone) stored = floats;
    std::string seed = {static_cast<char>(c), 3};
    const uint32_t raw = static_cast<uint32_t>(floats.size());
    seed.append(reinterpret_cast<const char*>(&raw), 4);
    seed += stored;
    Write(root / "fuzz_chunk_codec" / absl::StrCat(codec::CodecName(c), ".chunk"), seed);
  }
}

// The manifest written split (fuzz_manifest_tables), when it can be: with
// a compact root, as written now, and a format-2 root, as still read.
void WriteSplitSeed(const std::filesystem::path& root, const std::string& name,
                    const v1::CheckpointManifest& manifest) {
  for (const uint32_t format :
       {planning::kCompactRootFormatVersion, planning::kSplitManifestFormatVersion}) {
    std::optional<planning::SplitManifestFiles> split =
        planning::SplitManifest(manifest, {}, format);
    if (!split.has_value()) return;
    SplitManifestCase c;
    c.set_root(split->root);
    for (const std::string& table : split->tables) c.add_tables(table);
    const std::string suffix = format == planning::kCompactRootFormatVersion ? "" : "-format2";
    Write(root / "fuzz_manifest_tables" / (name + suffix + ".pb"), c.SerializeAsString());
  }
}

}  // namespace
}  // namespace ckpt::fuzz

int main(int argc, char** argv) {
  using namespace ckpt;  // NOLINT
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  std::map<std::string, fuzz::SaveCase> saves = fuzz::Saves();
  for (const auto& [name, save] : saves) {
    std::vector<v1::PlanSaveRequest> requests;
    absl::StatusOr<v1::SaveAssignment> assignment = fuzz::PlanSaveCase(save, &requests);
    if (!assignment.ok()) fuzz::Refused(name, assignment.status());
    const v1::CheckpointManifest manifest = fuzz::CheckSaveAssignment(*assignment, requests);
    fuzz::Write(root / "fuzz_save_request" / (name + ".pb"), save.SerializeAsString());
    for (const bool compact : {true, false}) {
      const fuzz::ClusterCase cluster = fuzz::ClusterOf(save, requests, compact);
      const std::vector<v1::NodeSavePlan> hosts(cluster.hosts().begin(), cluster.hosts().end());
      const std::string seed = compact ? name : name + "_spelled_out";
      if (absl::Status s = planning::PlanSave(hosts, fuzz::DaemonPlannerOptions()).status();
          !s.ok()) {
        fuzz::Refused(seed, s);
      }
      fuzz::Write(root / "fuzz_node_plans" / (seed + ".pb"), cluster.SerializeAsString());
      if (compact) fuzz::WriteMemoryPlanSeeds(root, name, hosts);
    }
    fuzz::Write(root / "fuzz_manifest" / (name + ".MANIFEST"), planning::EncodeManifest(manifest));
    fuzz::WriteSplitSeed(root, name, manifest);
    if (name == "multichunk") {
      fuzz::Write(root / "fuzz_manifest" / "multichunk_encoded_deltas.MANIFEST",
                  planning::EncodeManifest(fuzz::EncodedWithDeltas(manifest)));
      fuzz::WriteSplitSeed(root, "multichunk_encoded_deltas", fuzz::EncodedWithDeltas(manifest));
    }
  }
  for (const auto& [name, load] : fuzz::Loads(saves)) {
    std::vector<v1::PlanSaveRequest> requests;
    absl::StatusOr<v1::SaveAssignment> assignment = fuzz::PlanSaveCase(load.save(), &requests);
    if (!assignment.ok()) fuzz::Refused(name, assignment.status());
    const v1::CheckpointManifest manifest = fuzz::CheckSaveAssignment(*assignment, requests);
    const std::vector<v1::LoadRequest> ranks(load.ranks().begin(), load.ranks().end());
    absl::StatusOr<v1::LoadAssignment> plan = fuzz::PlanLoadRequests(manifest, ranks);
    if (!plan.ok()) fuzz::Refused(name, plan.status());
    fuzz::CheckLoadAssignment(*plan, ranks);
    fuzz::Write(root / "fuzz_load_request" / (name + ".pb"), load.SerializeAsString());
    for (const bool compact : {true, false}) {
      fuzz::ClusterCase cluster = fuzz::ClusterOf(load.save(), requests, compact);
      fuzz::AddLoads(ranks, compact, cluster);
      const std::vector<v1::NodeSavePlan> hosts(cluster.hosts().begin(), cluster.hosts().end());
      const std::vector<v1::NodeLoadPlan> loads(cluster.loads().begin(), cluster.loads().end());
      const std::string seed = compact ? name : name + "_spelled_out";
      absl::StatusOr<v1::SaveAssignment> saved =
          planning::PlanSave(hosts, fuzz::DaemonPlannerOptions());
      if (!saved.ok()) fuzz::Refused(seed, saved.status());
      if (absl::Status s = planning::PlanLoad(planning::ManifestOf(*saved), loads).status();
          !s.ok()) {
        fuzz::Refused(seed, s);
      }
      fuzz::Write(root / "fuzz_node_plans" / (seed + ".pb"), cluster.SerializeAsString());
    }
  }
  fuzz::WriteCodecSeeds(root);
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
