// The pieces of ckptctl export that need no checkpoint: the safetensors
// header and size parsing. (The whole export is tested end to end by the
// agent's pytest, against a reader written from the format's spec.)
#include "tests/catch.h"

#include <cstdint>
#include <string>

#include "tools/ckptctl/export.h"
#include "tools/ckptctl/safetensors.h"

namespace ckpt::ctl {
namespace {

TEST_CASE("safetensors header: length, JSON, padding to 8", "[safetensors]") {
  const std::string header =
      SafetensorsHeader({{"a.weight", "BF16", {2, 3}, 0, 12}, {"quote\"d\n", "BOOL", {}, 12, 13}});
  REQUIRE(header.size() % 8 == 0);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(header[i]);
  REQUIRE(n == header.size() - 8);
  const std::string json = header.substr(8);
  CHECK(
      json.rfind(
          R"({"__metadata__":{"format":"pt"},"a.weight":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)",
          0) == 0);
  CHECK(json.find(R"("quote\"d\u000a":{"dtype":"BOOL","shape":[],"data_offsets":[12,13]}})") !=
        std::string::npos);
  CHECK(json.find_last_not_of(' ') == json.find_last_of('}'));
}

TEST_CASE("safetensors dtypes: every stored dtype has its name", "[safetensors]") {
  CHECK(*SafetensorsDType(v1::FLOAT32) == "F32");
  CHECK(*SafetensorsDType(v1::BFLOAT16) == "BF16");
  CHECK(*SafetensorsDType(v1::BOOL) == "BOOL");
  CHECK(*SafetensorsDType(v1::FLOAT8_E4M3) == "F8_E4M3");
  CHECK(*SafetensorsDType(v1::FLOAT8_E5M2) == "F8_E5M2");
  CHECK(*SafetensorsDType(v1::INT64) == "I64");
  CHECK_FALSE(SafetensorsDType(v1::DType(0)).ok());
}

TEST_CASE("export sizes: decimal and binary units, nothing else", "[safetensors]") {
  CHECK(*ParseSize("5GB") == 5'000'000'000ull);
  CHECK(*ParseSize("2GiB") == 2ull << 30);
  CHECK(*ParseSize("64 mib") == 64ull << 20);
  CHECK(*ParseSize("4096") == 4096);
  CHECK(*ParseSize("1KB") == 1000);
  CHECK_FALSE(ParseSize("lots").ok());
  CHECK_FALSE(ParseSize("0GB").ok());
  CHECK_FALSE(ParseSize("-1").ok());
  CHECK_FALSE(ParseSize("99999999999999999999GB").ok());
}

}  // namespace
}  // namespace ckpt::ctl
