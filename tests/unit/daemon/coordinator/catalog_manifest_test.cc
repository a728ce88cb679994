// Hostile and damaged manifests: ValidateManifest refuses every class of
// lie a MANIFEST with a valid CRC trailer can tell, and the catalog applies
// it to everything it reads.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/commit.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

constexpr char kSource[] = "/r/job/step-5/MANIFEST";

// A valid manifest: tensor "w" FLOAT32 [4, 1024] in two row shards of 8 KiB,
// the first in two 4 KiB chunks; one object.
v1::CheckpointManifest Good() {
  v1::CheckpointManifest m;
  m.set_format_version(1);
  m.set_job("job");
  m.set_step(5);
  v1::TensorEntry* t = m.add_tensors();
  t->set_fqn("w");
  t->set_dtype(v1::FLOAT32);
  t->add_global_shape(4);
  t->add_global_shape(1024);
  for (int s = 0; s < 2; ++s) {
    v1::StoredShard* shard = t->add_shards();
    v1::Box* box = shard->mutable_region()->mutable_box();
    box->add_offsets(2 * s);
    box->add_offsets(0);
    box->add_lengths(2);
    box->add_lengths(1024);
    const int chunks = s == 0 ? 2 : 1;
    const uint64_t length = 8192 / chunks;
    for (int c = 0; c < chunks; ++c) {
      v1::StoredChunk* chunk = shard->add_chunks();
      chunk->set_file("data/h0-0.bin");
      chunk->set_file_offset(8192 * s + length * c);
      chunk->set_shard_offset(length * c);
      chunk->set_length(length);
    }
  }
  v1::ObjectEntry* o = m.add_objects();
  o->set_key("rng");
  o->set_rank(0);
  o->mutable_chunk()->set_file("data/h0-1.bin");
  o->mutable_chunk()->set_length(33);
  return m;
}

v1::StoredChunk& FirstChunk(v1::CheckpointManifest& m) {
  return *m.mutable_tensors(0)->mutable_shards(0)->mutable_chunks(0);
}

absl::Status Check(const v1::CheckpointManifest& m, const planning::ManifestLimits& limits = {}) {
  return planning::ValidateManifest(m, "job", 5, kSource, limits);
}

// Each case breaks Good() one way; every one must be refused naming the
// manifest and saying what is wrong.
struct Hostile {
  const char* name;
  std::function<void(v1::CheckpointManifest&)> edit;
  absl::StatusCode code;
  const char* says;
};

TEST_CASE("ValidateManifest accepts what the save planner writes", "[manifest_check]") {
  CKPT_REQUIRE_OK(Check(Good()));
  // An empty object has a chunk of length 0 (and may name no file).
  v1::CheckpointManifest m = Good();
  m.mutable_objects(0)->mutable_chunk()->set_length(0);
  CKPT_REQUIRE_OK(Check(m));
  m.mutable_objects(0)->mutable_chunk()->clear_file();
  CKPT_REQUIRE_OK(Check(m));
  // ...or the place where another chunk begins: it holds no byte of it.
  m.mutable_objects(0)->mutable_chunk()->set_file("data/h0-0.bin");
  CKPT_REQUIRE_OK(Check(m));
  // An empty shard has no chunks.
  m = Good();
  v1::TensorEntry* empty = m.add_tensors();
  empty->set_fqn("e");
  empty->set_dtype(v1::INT8);
  empty->add_global_shape(0);
  empty->add_shards();
  CKPT_REQUIRE_OK(Check(m));
}

// A chunk stored grouped-zstd, and a delta against step 2's same chunk.
void Encode(v1::StoredChunk& c) {
  c.set_codec(v1::CHUNK_CODEC_GROUPED_ZSTD);
  c.set_stored_length(100);
  c.set_element_bytes(4);
}
void MakeDelta(v1::CheckpointManifest& m) {
  m.set_delta_base_step(2);
  m.set_delta_ordinal(1);
  v1::StoredChunk& c = FirstChunk(m);
  Encode(c);
  const v1::StoredChunk base = c;  // the same place in step 2
  c.set_delta_base_step(2);
  *c.mutable_delta_base() = base;
}

TEST_CASE("ValidateManifest takes encoded chunks and deltas as the writers make them",
          "[manifest_check][codec]") {
  v1::CheckpointManifest m = Good();
  Encode(FirstChunk(m));
  CHECK(Check(m).ok());
  m = Good();
  MakeDelta(m);
  INFO(Check(m).ToString());
  CHECK(Check(m).ok());
}

TEST_CASE("ValidateManifest refuses hostile manifests", "[manifest_check]") {
  using absl::StatusCode;
  const std::vector<Hostile> cases = {
      {"unknown codec", [](auto& m) { FirstChunk(m).set_codec(static_cast<v1::ChunkCodec>(9)); },
       StatusCode::kDataLoss, "unknown codec 9"},
      {"stores more than it holds",
       [](auto& m) {
         Encode(FirstChunk(m));
         FirstChunk(m).set_stored_length(4097);
       },
       StatusCode::kDataLoss, "stores 4097 encoded bytes for 4096"},
      {"stores nothing",
       [](auto& m) {
         Encode(FirstChunk(m));
         FirstChunk(m).set_stored_length(0);
       },
       StatusCode::kDataLoss, "stores 0 encoded bytes"},
      {"zstd with a bad element size",
       [](auto& m) {
         Encode(FirstChunk(m));
         FirstChunk(m).set_codec(v1::CHUNK_CODEC_ZSTD);
         FirstChunk(m).set_element_bytes(257);
       },
       StatusCode::kDataLoss, "element size 257"},
      {"a raw delta",
       [](auto& m) {
         MakeDelta(m);
         FirstChunk(m).set_codec(v1::CHUNK_CODEC_NONE);
       },
       StatusCode::kDataLoss, "a delta stored raw"},
      {"a delta against a larger chunk",
       [](auto& m) {
         MakeDelta(m);
         FirstChunk(m).mutable_delta_base()->set_length(64 << 20);
       },
       StatusCode::kDataLoss, "is 67108864 bytes, not 4096"},
      {"a delta against a delta",
       [](auto& m) {
         MakeDelta(m);
         v1::StoredChunk inner = FirstChunk(m).delta_base();
         *FirstChunk(m).mutable_delta_base()->mutable_delta_base() = inner;
       },
       StatusCode::kDataLoss, "is itself a delta"},
      {"a delta base outside the step",
       [](auto& m) {
         MakeDelta(m);
         FirstChunk(m).mutable_delta_base()->set_file("../../x");
       },
       StatusCode::kDataLoss, "leaves its directory"},
      {"a delta against another base than the manifest's",
       [](auto& m) {
         MakeDelta(m);
         FirstChunk(m).set_delta_base_step(1);
       },
       StatusCode::kDataLoss, "not the manifest's delta base"},
      {"a delta against a later step",
       [](auto& m) {
         MakeDelta(m);
         m.set_delta_base_step(5);
       },
       StatusCode::kDataLoss, "not an earlier step"},
      {"a delta without an ordinal",
       [](auto& m) {
         MakeDelta(m);
         m.set_delta_ordinal(0);
       },
       StatusCode::kDataLoss, "delta ordinal is 0"},
      {"traversal", [](auto& m) { FirstChunk(m).set_file("../../other/step-1/data/h0-0.bin"); },
       StatusCode::kDataLoss, "leaves its directory"},
      {"traversal inside", [](auto& m) { FirstChunk(m).set_file("data/../../x"); },
       StatusCode::kDataLoss, "leaves its directory"},
      {"absolute name", [](auto& m) { FirstChunk(m).set_file("/etc/passwd"); },
       StatusCode::kDataLoss, "leaves its directory"},
      {"empty name", [](auto& m) { FirstChunk(m).set_file(""); }, StatusCode::kDataLoss,
       "file name is empty"},
      {"empty component", [](auto& m) { FirstChunk(m).set_file("data//h0-0.bin"); },
       StatusCode::kDataLoss, "empty component"},
      {"object traversal", [](auto& m) { m.mutable_objects(0)->mutable_chunk()->set_file("../x"); },
       StatusCode::kDataLoss, "object \"rng\""},
      {"copied from another job", [](auto& m) { m.set_job("other"); },
       StatusCode::kFailedPrecondition, "not of job job step 5"},
      {"copied from another step", [](auto& m) { m.set_step(4); }, StatusCode::kFailedPrecondition,
       "copied"},
      {"format version", [](auto& m) { m.set_format_version(7); }, StatusCode::kDataLoss,
       "format version 7"},
      {"shard with no chunks",
       [](auto& m) { m.mutable_tensors(0)->mutable_shards(1)->clear_chunks(); },
       StatusCode::kDataLoss, "lists no chunks"},
      {"chunk shorter than its shard",
       [](auto& m) { m.mutable_tensors(0)->mutable_shards(1)->mutable_chunks(0)->set_length(100); },
       StatusCode::kDataLoss, "cover 100 of its 8192 bytes"},
      {"chunk longer than its shard",
       [](auto& m) {
         m.mutable_tensors(0)->mutable_shards(1)->mutable_chunks(0)->set_length(8193);
       },
       StatusCode::kDataLoss, "runs past the shard"},
      {"huge chunk", [](auto& m) { FirstChunk(m).set_length(uint64_t{1} << 63); },
       StatusCode::kDataLoss, "more than the limit"},
      {"overlapping chunks",
       [](auto& m) {
         m.mutable_tensors(0)->mutable_shards(0)->mutable_chunks(1)->set_shard_offset(100);
       },
       StatusCode::kDataLoss, "starts at shard offset 100 where 4096 was expected"},
      {"gap between chunks",
       [](auto& m) {
         m.mutable_tensors(0)->mutable_shards(0)->mutable_chunks(1)->set_shard_offset(5000);
       },
       StatusCode::kDataLoss, "starts at shard offset 5000"},
      {"chunks out of order",
       [](auto& m) {
         m.mutable_tensors(0)->mutable_shards(0)->mutable_chunks()->SwapElements(0, 1);
       },
       StatusCode::kDataLoss, "chunk 0 starts at shard offset 4096"},
      {"empty chunk",
       [](auto& m) {
         v1::StoredChunk* c = m.mutable_tensors(0)->mutable_shards(1)->add_chunks();
         c->set_file("data/h0-0.bin");
         c->set_shard_offset(8192);
       },
       StatusCode::kDataLoss, "is empty"},
      {"file offset wraps", [](auto& m) { FirstChunk(m).set_file_offset(UINT64_MAX - 10); },
       StatusCode::kDataLoss, "beyond any file"},
      {"unknown dtype",
       [](auto& m) { m.mutable_tensors(0)->set_dtype(static_cast<v1::DType>(999)); },
       StatusCode::kDataLoss, "tensor w"},
      {"region outside the tensor",
       [](auto& m) {
         m.mutable_tensors(0)->mutable_shards(1)->mutable_region()->mutable_box()->set_offsets(0,
                                                                                               3);
       },
       StatusCode::kDataLoss, "shard 1"},
      {"shape overflows",
       [](auto& m) {
         m.mutable_tensors(0)->set_global_shape(0, INT64_C(1) << 62);
         m.mutable_tensors(0)->set_global_shape(1, INT64_C(1) << 62);
       },
       StatusCode::kDataLoss, "tensor w"},
      {"duplicate tensor", [](auto& m) { *m.add_tensors() = m.tensors(0); }, StatusCode::kDataLoss,
       "listed twice"},
      {"bad tensor name", [](auto& m) { m.mutable_tensors(0)->set_fqn("../w"); },
       StatusCode::kDataLoss, ""},
      {"huge object",
       [](auto& m) { m.mutable_objects(0)->mutable_chunk()->set_length(uint64_t{1} << 62); },
       StatusCode::kDataLoss, "object \"rng\" of rank 0 is 4611686018427387904 bytes"},
      {"object chunk not at 0",
       [](auto& m) { m.mutable_objects(0)->mutable_chunk()->set_shard_offset(4); },
       StatusCode::kDataLoss, "not 0"},
      {"duplicate object", [](auto& m) { *m.add_objects() = m.objects(0); }, StatusCode::kDataLoss,
       "listed twice"},
      {"object rank", [](auto& m) { m.mutable_objects(0)->set_rank(-5); }, StatusCode::kDataLoss,
       "rank below -1"},
      // Found by tests/fuzz/fuzz_manifest: the load planner joins chunks at
      // one place into one read, and copied the second tensor's bytes from
      // past the end of the first one's chunk.
      {"two tensors at one place",
       [](auto& m) {
         v1::TensorEntry* t = m.add_tensors();
         t->set_fqn("s");
         t->set_dtype(v1::FLOAT32);
         v1::StoredChunk* c = t->add_shards()->add_chunks();
         c->set_file("data/h0-0.bin");
         c->set_length(4);
       },
       StatusCode::kDataLoss, "overlap in \"data/h0-0.bin\" at offset 0"},
      {"two objects at one place",
       [](auto& m) {
         v1::ObjectEntry* o = m.add_objects();
         o->set_key("config");
         o->set_rank(-1);
         o->mutable_chunk()->set_file("data/h0-1.bin");
         o->mutable_chunk()->set_length(10);
       },
       StatusCode::kDataLoss,
       "object \"rng\" of rank 0 and object \"config\" of rank -1 overlap in \"data/h0-1.bin\" "
       "at offset 0"},
      {"object inside a tensor's chunk",
       [](auto& m) {
         m.mutable_objects(0)->mutable_chunk()->set_file("data/h0-0.bin");
         m.mutable_objects(0)->mutable_chunk()->set_file_offset(100);
       },
       StatusCode::kDataLoss, "tensor \"w\" and object \"rng\" of rank 0 overlap"},
      {"chunks of two shards overlap",
       [](auto& m) {
         m.mutable_tensors(0)->mutable_shards(1)->mutable_chunks(0)->set_file_offset(4096);
       },
       StatusCode::kDataLoss, "at offset 4096 (chunks may not share bytes)"},
  };
  for (const Hostile& c : cases) {
    INFO("case: " << c.name);
    v1::CheckpointManifest m = Good();
    c.edit(m);
    CKPT_REQUIRE_ERROR(Check(m), c.code, kSource, c.says);
  }
}

TEST_CASE("ValidateManifest bounds every count", "[manifest_check]") {
  planning::ManifestLimits limits;
  limits.max_tensors = 1;
  v1::CheckpointManifest m = Good();
  CKPT_REQUIRE_OK(Check(m, limits));
  m.add_tensors()->set_fqn("x");
  CKPT_REQUIRE_ERROR(Check(m, limits), absl::StatusCode::kFailedPrecondition, kSource,
                     "2 tensors, more than the limit of 1");

  limits = {};
  limits.max_chunks = 3;
  CKPT_REQUIRE_ERROR(Check(Good(), limits), absl::StatusCode::kFailedPrecondition, "chunks");
  limits.max_chunks = 4;  // three tensor chunks and the object's
  CKPT_REQUIRE_OK(Check(Good(), limits));

  limits = {};
  limits.max_shards = 1;
  CKPT_REQUIRE_ERROR(Check(Good(), limits), absl::StatusCode::kFailedPrecondition, "shards");

  limits = {};
  limits.max_objects = 0;
  CKPT_REQUIRE_ERROR(Check(Good(), limits), absl::StatusCode::kFailedPrecondition, "objects");

  limits = {};
  limits.max_metadata_entries = 1;
  m = Good();
  (*m.mutable_user_metadata())["a"] = "1";
  CKPT_REQUIRE_OK(Check(m, limits));
  (*m.mutable_user_metadata())["b"] = "2";
  CKPT_REQUIRE_ERROR(Check(m, limits), absl::StatusCode::kFailedPrecondition, "metadata");
  limits = {};
  limits.max_metadata_bytes = 10;
  (*m.mutable_user_metadata())["c"] = std::string(20, 'v');
  CKPT_REQUIRE_ERROR(Check(m, limits), absl::StatusCode::kFailedPrecondition, "metadata");

  limits = {};
  limits.max_dims = 1;
  CKPT_REQUIRE_ERROR(Check(Good(), limits), absl::StatusCode::kDataLoss, "dimensions");
}

TEST_CASE("error messages do not carry a hostile string verbatim", "[manifest_check]") {
  v1::CheckpointManifest m = Good();
  m.set_job(std::string("evil\nckptd: forged log line") + std::string(500, 'x'));
  const absl::Status s = Check(m);
  INFO(s.ToString());
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(s.message().find('\n') == absl::string_view::npos);
  CHECK(s.message().size() < 400);
}

// ---------------------------------------------------------------------------
// Through the catalog

void Write(storage::Backend& backend, const std::string& path, const std::string& contents) {
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, contents.data(), contents.size()));
  CKPT_REQUIRE_OK((*file)->Close());
}

// Writes `m` as the MANIFEST of root/job/step-N, with a valid CRC trailer:
// only its contents lie.
void PlantManifest(storage::Backend& backend, const std::string& job, int64_t step,
                   const v1::CheckpointManifest& m) {
  CKPT_REQUIRE_OK(backend.CreateDirs(storage::StepDir("/r", job, step) + "/data"));
  Write(backend, storage::StepDir("/r", job, step) + "/MANIFEST", planning::EncodeManifest(m));
}

TEST_CASE("the catalog validates every manifest it reads", "[catalog][manifest_check]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Catalog catalog(*backend, "/r");
  PlantManifest(*backend, "job", 5, Good());
  CKPT_REQUIRE_OK(catalog.ReadManifest("job", 5));
  CKPT_REQUIRE_OK(catalog.ReadLoadManifest("job", 5));

  // The same manifest copied into another step's and another job's directory.
  PlantManifest(*backend, "job", 6, Good());
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("job", 6), absl::StatusCode::kFailedPrecondition,
                     "/r/job/step-6/MANIFEST", "job \"job\" step 5", "not of job job step 6");
  // A load reads it in columns (column_manifest_read.h), through the same checks.
  CKPT_REQUIRE_ERROR(catalog.ReadLoadManifest("job", 6), absl::StatusCode::kFailedPrecondition,
                     "/r/job/step-6/MANIFEST", "not of job job step 6");
  PlantManifest(*backend, "copy", 5, Good());
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("copy", 5), absl::StatusCode::kFailedPrecondition,
                     "/r/copy/step-5/MANIFEST");

  v1::CheckpointManifest traversal = Good();
  traversal.set_step(7);
  FirstChunk(traversal).set_file("../../job/step-5/data/h0-0.bin");
  PlantManifest(*backend, "job", 7, traversal);
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("job", 7), absl::StatusCode::kDataLoss,
                     "/r/job/step-7/MANIFEST", "leaves its directory");
  CKPT_REQUIRE_ERROR(catalog.ReadLoadManifest("job", 7), absl::StatusCode::kDataLoss,
                     "/r/job/step-7/MANIFEST", "leaves its directory");

  // A step directory without a MANIFEST is broken, not missing.
  CKPT_REQUIRE_OK(backend->CreateDirs("/r/job/step-8"));
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("job", 8), absl::StatusCode::kDataLoss,
                     "/r/job/step-8/MANIFEST");
  CKPT_REQUIRE_ERROR(catalog.ReadLoadManifest("job", 8), absl::StatusCode::kDataLoss,
                     "/r/job/step-8/MANIFEST");
}

TEST_CASE("the MANIFEST size is bounded before it is read", "[catalog][manifest_check]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  CatalogOptions options;
  options.limits.max_manifest_bytes = 64;
  Catalog catalog(*backend, "/r", options);
  PlantManifest(*backend, "job", 5, Good());
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("job", 5), absl::StatusCode::kFailedPrecondition,
                     "/r/job/step-5/MANIFEST", "limit of 64");
  CKPT_REQUIRE_ERROR(catalog.ReadLoadManifest("job", 5), absl::StatusCode::kFailedPrecondition,
                     "/r/job/step-5/MANIFEST", "limit of 64");
}

}  // namespace
}  // namespace ckpt::coordinator
