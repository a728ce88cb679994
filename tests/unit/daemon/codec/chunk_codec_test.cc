// The chunk codecs: every dtype's awkward values (NaN payloads, infinities,
// denormals, -0.0) come back bit for bit through each codec; what does not
// shrink is stored raw; and a stored chunk that is not what the manifest
// says fails with DATA_LOSS naming why, never writing past the chunk (a
// flipped byte inside a valid frame is the chunk CRC's to catch, after
// decoding; fuzz_chunk_codec feeds the decoder everything else).
#include "daemon/codec/chunk_codec.h"
#include "daemon/codec/step_delta.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/catch.h"

namespace ckpt::codec {
namespace {

template <typename T>
std::vector<char> BytesOf(const std::vector<T>& values) {
  std::vector<char> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A float32 from its bits, so NaN payloads survive construction.
float F32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
double F64(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// Values shaped like trained weights (small, centred, many alike in their
// high bytes) with the special ones spread among them.
std::vector<char> Float32Chunk(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> weight(0.0f, 0.02f);
  std::vector<float> v(n);
  for (float& x : v) x = weight(rng);
  const float specials[] = {F32(0x7fc00001),  // quiet NaN with a payload
                            F32(0xffa5a5a5),  // negative signalling NaN
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            F32(0x00000001),  // the smallest denormal
                            F32(0x807fffff),  // the largest negative denormal
                            -0.0f,
                            0.0f};
  for (size_t i = 0; i < n; i += 97) v[i] = specials[(i / 97) % 8];
  return BytesOf(v);
}

std::vector<char> Float64Chunk(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> weight(0.0, 0.02);
  std::vector<double> v(n);
  for (double& x : v) x = weight(rng);
  const double specials[] = {F64(0x7ff8000000000123ull), F64(0xfff0000000000001ull),
                             std::numeric_limits<double>::infinity(), F64(1), -0.0};
  for (size_t i = 0; i < n; i += 89) v[i] = specials[(i / 89) % 5];
  return BytesOf(v);
}

// bf16 and fp16 as their 16-bit patterns: the top half of float32 weights
// (bf16), and fp16 specials (0x7e01 NaN payload, 0xfc00 -inf, 0x0001
// denormal, 0x8000 -0.0).
std::vector<char> Half16Chunk(size_t n, uint32_t seed, bool bf16) {
  std::vector<char> f32 = Float32Chunk(n, seed);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, f32.data() + 4 * i, 4);
    v[i] = static_cast<uint16_t>(bits >> 16);
  }
  if (!bf16) {
    const uint16_t specials[] = {0x7e01, 0xfc00, 0x0001, 0x8000, 0x7c00};
    for (size_t i = 0; i < n; i += 53) v[i] = specials[(i / 53) % 5];
  }
  return BytesOf(v);
}

std::vector<char> IntChunk(size_t n, int width, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<char> out(n * width);
  for (size_t i = 0; i < n; ++i) {
    // Token ids and counters: small values in wide integers.
    const uint64_t x = rng() % 50000;
    std::memcpy(out.data() + i * width, &x, width);
  }
  return out;
}

struct Case {
  const char* name;
  int width;
  std::vector<char> raw;
};

std::vector<Case> Dtypes() {
  const size_t n = 64 * 1024 + 3;  // not a multiple of anything
  return {{"float32", 4, Float32Chunk(n, 1)},       {"float64", 8, Float64Chunk(n, 2)},
          {"bfloat16", 2, Half16Chunk(n, 3, true)}, {"float16", 2, Half16Chunk(n, 4, false)},
          {"int64", 8, IntChunk(n, 8, 5)},          {"int32", 4, IntChunk(n, 4, 6)},
          {"uint8", 1, IntChunk(n, 1, 7)},          {"bool", 1, std::vector<char>(n, 1)}};
}

TEST_CASE("every dtype's values come back bit-exact through each codec", "[unit][codec]") {
  for (const Case& c : Dtypes()) {
    for (Codec codec : {Codec::kNone, Codec::kZstd, Codec::kGroupedZstd}) {
      INFO(c.name << " through " << CodecName(codec));
      std::string stored;
      absl::StatusOr<Codec> used = EncodeChunk(codec, c.width, c.raw, {}, &stored);
      REQUIRE(used.ok());
      if (codec == Codec::kNone) CHECK(*used == Codec::kNone);
      // What is stored raw is the raw bytes themselves.
      const std::string kept =
          *used == Codec::kNone ? std::string(c.raw.begin(), c.raw.end()) : stored;
      std::vector<char> back(c.raw.size(), '\x5a');
      absl::Status decoded = DecodeChunk(*used, c.width, kept, absl::MakeSpan(back));
      INFO(decoded.ToString());
      REQUIRE(decoded.ok());
      CHECK(back == c.raw);
    }
  }
}

TEST_CASE("grouping the planes of trained-like weights shrinks them more than zstd alone",
          "[unit][codec]") {
  const std::vector<char> raw = Half16Chunk(256 * 1024, 9, /*bf16=*/true);
  std::string grouped, plain;
  REQUIRE(*EncodeChunk(Codec::kGroupedZstd, 2, raw, {}, &grouped) == Codec::kGroupedZstd);
  absl::StatusOr<Codec> z = EncodeChunk(Codec::kZstd, 2, raw, {}, &plain);
  REQUIRE(z.ok());
  const size_t plain_size = *z == Codec::kNone ? raw.size() : plain.size();
  INFO("grouped " << grouped.size() << ", zstd " << plain_size << ", raw " << raw.size());
  CHECK(grouped.size() < plain_size);
  CHECK(grouped.size() < raw.size() * 0.9);
}

TEST_CASE("what does not shrink is stored raw", "[unit][codec]") {
  std::mt19937_64 rng(11);
  std::vector<char> noise(1 << 20);
  for (char& b : noise) b = static_cast<char>(rng());
  for (Codec codec : {Codec::kZstd, Codec::kGroupedZstd}) {
    std::string stored = "left over";
    absl::StatusOr<Codec> used = EncodeChunk(codec, 4, noise, {}, &stored);
    REQUIRE(used.ok());
    CHECK(*used == Codec::kNone);
    CHECK(stored.empty());
  }
  // A set margin: a chunk that would shrink by 1% is still stored raw when
  // 2% is asked, and encoded when 0% is.
  std::vector<char> almost = noise;
  std::memset(almost.data(), 0, almost.size() / 50);  // 2% zeros: saves ~2%
  std::string stored;
  CHECK(*EncodeChunk(Codec::kZstd, 1, almost, {.level = 1, .min_saving = 0.05}, &stored) ==
        Codec::kNone);
  CHECK(*EncodeChunk(Codec::kZstd, 1, almost, {.level = 1, .min_saving = 0.0}, &stored) ==
        Codec::kZstd);
}

TEST_CASE("a stored chunk that is not what the manifest says is DATA_LOSS", "[unit][codec]") {
  const std::vector<char> raw = Float32Chunk(4096, 13);
  std::string stored;
  REQUIRE(*EncodeChunk(Codec::kGroupedZstd, 4, raw, {}, &stored) == Codec::kGroupedZstd);
  std::vector<char> back(raw.size());

  SECTION("a shorter recorded length: the decoder stops at the chunk's end") {
    std::vector<char> shorter(raw.size() - 1);
    absl::Status s = DecodeChunk(Codec::kGroupedZstd, 4, stored, absl::MakeSpan(shorter));
    CHECK(absl::IsDataLoss(s));
    CHECK(s.message().find("holds") != absl::string_view::npos);
  }
  SECTION("a longer recorded length: the chunk is not filled") {
    std::vector<char> longer(raw.size() + 8);
    absl::Status s = DecodeChunk(Codec::kGroupedZstd, 4, stored, absl::MakeSpan(longer));
    CHECK(absl::IsDataLoss(s));
  }
  SECTION("bytes after the frame") {
    absl::Status s = DecodeChunk(Codec::kGroupedZstd, 4, stored + "tail", absl::MakeSpan(back));
    CHECK(absl::IsDataLoss(s));
    CHECK(s.message().find("follow the zstd frame") != absl::string_view::npos);
  }
  SECTION("not zstd at all") {
    absl::Status s = DecodeChunk(Codec::kZstd, 4, std::string(100, 'x'), absl::MakeSpan(back));
    CHECK(absl::IsDataLoss(s));
    CHECK(s.message().find("not a zstd frame") != absl::string_view::npos);
  }
  SECTION("a raw chunk of the wrong length") {
    absl::Status s = DecodeChunk(Codec::kNone, 4, std::string(10, 'x'), absl::MakeSpan(back));
    CHECK(absl::IsDataLoss(s));
  }
  SECTION("element sizes out of range") {
    CHECK(absl::IsInvalidArgument(DecodeChunk(Codec::kNone, 0, stored, absl::MakeSpan(back))));
    CHECK(absl::IsInvalidArgument(EncodeChunk(Codec::kZstd, 17, raw, {}, &stored).status()));
  }
}

TEST_CASE("codecs are named", "[unit][codec]") {
  for (Codec c : {Codec::kNone, Codec::kZstd, Codec::kGroupedZstd}) {
    CHECK(*CodecNamed(CodecName(c)) == c);
  }
  absl::StatusOr<Codec> bad = CodecNamed("lz4");
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  CHECK(bad.status().message().find("grouped-zstd") != absl::string_view::npos);
}

TEST_CASE("planes group and ungroup, with a tail", "[unit][codec]") {
  const std::vector<char> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // two 4-byte elements + 3
  std::vector<char> grouped(in.size()), back(in.size());
  GroupBytes(4, in, absl::MakeSpan(grouped));
  CHECK(grouped == std::vector<char>{1, 5, 2, 6, 3, 7, 4, 8, 9, 10, 11});
  UngroupBytes(4, grouped, absl::MakeSpan(back));
  CHECK(back == in);
}

TEST_CASE("a step's XOR against its base rebuilds it, and compresses where training moved little",
          "[unit][codec]") {
  // Step 2 is step 1 with one float in three nudged by about an ulp of
  // bf16's mantissa: the XOR is zero in most bytes.
  std::vector<char> base = Float32Chunk(100003, 21);
  std::vector<char> next = base;
  for (size_t i = 0; i + 4 <= next.size(); i += 12) next[i] ^= 0x3;  // low mantissa bits
  std::vector<char> delta = next;
  XorInto(base, absl::MakeSpan(delta));
  std::string stored, whole;
  REQUIRE(*EncodeChunk(Codec::kGroupedZstd, 4, delta, {}, &stored) == Codec::kGroupedZstd);
  absl::StatusOr<Codec> full = EncodeChunk(Codec::kGroupedZstd, 4, next, {}, &whole);
  REQUIRE(full.ok());
  const size_t whole_size = *full == Codec::kNone ? next.size() : whole.size();
  INFO("delta " << stored.size() << ", whole " << whole_size);
  CHECK(stored.size() * 4 < whole_size);
  std::vector<char> rebuilt(delta.size());
  REQUIRE(DecodeChunk(Codec::kGroupedZstd, 4, stored, absl::MakeSpan(rebuilt)).ok());
  XorInto(base, absl::MakeSpan(rebuilt));
  CHECK(rebuilt == next);
}

}  // namespace
}  // namespace ckpt::codec
