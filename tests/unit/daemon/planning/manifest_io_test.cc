// MANIFEST encoding: it round-trips, and no single corrupted byte, no
// truncation and no appended garbage gets past the CRC trailer.
#include "daemon/planning/manifest_io.h"

#include <cstdint>
#include <string>

#include "proto/lib/crc32c.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

v1::CheckpointManifest SmallManifest() {
  v1::CheckpointManifest m;
  m.set_format_version(1);
  m.set_job("job");
  m.set_step(42);
  m.set_created_unix_ms(1700000000123);
  m.mutable_topology()->set_world_size(2);
  m.mutable_topology()->add_hosts()->set_host("h0");
  v1::TensorEntry* t = m.add_tensors();
  t->set_fqn("layers.0.w");
  t->set_dtype(v1::BFLOAT16);
  t->add_global_shape(8);
  t->add_global_shape(16);
  v1::StoredShard* s = t->add_shards();
  s->mutable_region()->mutable_box()->add_offsets(0);
  s->mutable_region()->mutable_box()->add_offsets(0);
  s->mutable_region()->mutable_box()->add_lengths(4);
  s->mutable_region()->mutable_box()->add_lengths(16);
  s->set_writer_rank(1);
  v1::StoredChunk* c = s->add_chunks();
  c->set_file("data/h0-0.bin");
  c->set_file_offset(4096);
  c->set_length(128);
  c->set_crc32c(0xdeadbeef);
  v1::ObjectEntry* o = m.add_objects();
  o->set_key("rng");
  o->set_rank(-1);
  o->mutable_chunk()->set_file("data/h0-0.bin");
  o->mutable_chunk()->set_length(7);
  o->mutable_chunk()->set_crc32c(0x01020304);
  (*m.mutable_user_metadata())["k"] = "v";
  return m;
}

TEST_CASE("manifest round trip", "[manifest_io]") {
  const v1::CheckpointManifest m = SmallManifest();
  const std::string encoded = EncodeManifest(m);
  std::string payload;
  REQUIRE(m.SerializeToString(&payload));
  // Layout: the serialized message, then its CRC32C little-endian.
  REQUIRE(encoded.size() == payload.size() + 4);
  CHECK(encoded.substr(0, payload.size()) == payload);
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  for (int i = 0; i < 4; ++i) {
    CHECK(static_cast<uint8_t>(encoded[payload.size() + i]) == ((crc >> (8 * i)) & 0xff));
  }
  absl::StatusOr<v1::CheckpointManifest> decoded = DecodeManifest(encoded, "MANIFEST");
  CKPT_REQUIRE_OK(decoded);
  CHECK(decoded->SerializeAsString() == payload);
  CHECK(decoded->tensors(0).shards(0).chunks(0).crc32c() == 0xdeadbeef);
  CHECK(decoded->objects(0).rank() == -1);
}

TEST_CASE("an empty manifest round-trips", "[manifest_io]") {
  const std::string encoded = EncodeManifest(v1::CheckpointManifest());
  CHECK(encoded.size() == 4);  // empty payload, CRC of nothing
  absl::StatusOr<v1::CheckpointManifest> decoded = DecodeManifest(encoded, "m");
  CKPT_REQUIRE_OK(decoded);
  CHECK(decoded->ByteSizeLong() == 0);
}

TEST_CASE("every single corrupted byte is DATA_LOSS", "[manifest_io]") {
  const std::string encoded = EncodeManifest(SmallManifest());
  REQUIRE(encoded.size() > 60);
  int checked = 0;
  for (size_t pos = 0; pos < encoded.size(); ++pos) {
    for (uint8_t mask : {0x01, 0x80, 0x5a, 0xff}) {
      std::string bad = encoded;
      bad[pos] = static_cast<char>(bad[pos] ^ mask);
      absl::StatusOr<v1::CheckpointManifest> decoded =
          DecodeManifest(bad, "/r/job/step-42/MANIFEST");
      INFO("position " << pos << " mask " << int{mask});
      REQUIRE(decoded.status().code() == absl::StatusCode::kDataLoss);
      CHECK(std::string(decoded.status().message()).find("/r/job/step-42/MANIFEST") !=
            std::string::npos);
      ++checked;
    }
  }
  CHECK(checked == static_cast<int>(encoded.size()) * 4);
}

TEST_CASE("truncation and appended bytes are DATA_LOSS", "[manifest_io]") {
  const std::string encoded = EncodeManifest(SmallManifest());
  for (size_t n = 0; n < encoded.size(); ++n) {
    INFO("truncated to " << n);
    absl::StatusOr<v1::CheckpointManifest> decoded = DecodeManifest(encoded.substr(0, n), "M");
    REQUIRE(decoded.status().code() == absl::StatusCode::kDataLoss);
  }
  CKPT_REQUIRE_ERROR(DecodeManifest(encoded.substr(0, 3), "M"), absl::StatusCode::kDataLoss,
                     "M: manifest is truncated (3 bytes)");
  CKPT_REQUIRE_ERROR(DecodeManifest(encoded + std::string(1, '\0'), "M"),
                     absl::StatusCode::kDataLoss, "checksum mismatch");
  CKPT_REQUIRE_ERROR(DecodeManifest(encoded + encoded, "M"), absl::StatusCode::kDataLoss);
}

TEST_CASE("a payload with a valid CRC that does not parse is DATA_LOSS", "[manifest_io]") {
  // Field 6 (tensors), length-delimited, claiming 100 bytes that are not there.
  std::string payload = "\x32\x64\x01";
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  for (int i = 0; i < 4; ++i) payload.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  CKPT_REQUIRE_ERROR(DecodeManifest(payload, "M"), absl::StatusCode::kDataLoss,
                     "M: manifest does not parse");
}

}  // namespace
}  // namespace ckpt::planning
