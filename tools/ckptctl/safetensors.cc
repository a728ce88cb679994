#include "tools/ckptctl/safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ckpt::ctl {

absl::StatusOr<std::string> SafetensorsDType(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32: return std::string("F32");
    case v1::FLOAT16: return std::string("F16");
    case v1::BFLOAT16: return std::string("BF16");
    case v1::FLOAT64: return std::string("F64");
    case v1::INT8: return std::string("I8");
    case v1::UINT8: return std::string("U8");
    case v1::INT16: return std::string("I16");
    case v1::INT32: return std::string("I32");
    case v1::INT64: return std::string("I64");
    case v1::BOOL: return std::string("BOOL");
    case v1::FLOAT8_E4M3: return std::string("F8_E4M3");
    case v1::FLOAT8_E5M2: return std::string("F8_E5M2");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", v1::DType_Name(dtype), " has no safetensors name"));
  }
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string SafetensorsHeader(const std::vector<SafetensorsEntry>& entries) {
  std::string json = R"({"__metadata__":{"format":"pt"})";
  for (const SafetensorsEntry& e : entries) {
    absl::StrAppend(&json, ",", JsonString(e.name), ":{\"dtype\":\"", e.dtype, "\",\"shape\":[",
                    absl::StrJoin(e.shape, ","), "],\"data_offsets\":[", e.begin, ",", e.end,
                    "]}");
  }
  json += "}";
  // Padded with spaces so the data starts 8-byte aligned.
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

}  // namespace ckpt::ctl
