#include "tools/ckptctl/safetensors.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "proto/lib/dtype.h"

namespace ckpt::ctl {
namespace {

absl::StatusOr<v1::DType> DTypeOf(const std::string& name) {
  static const auto* names = new std::map<std::string, v1::DType>{{"F32", v1::FLOAT32},
                                                                  {"F16", v1::FLOAT16},
                                                                  {"BF16", v1::BFLOAT16},
                                                                  {"F64", v1::FLOAT64},
                                                                  {"I8", v1::INT8},
                                                                  {"U8", v1::UINT8},
                                                                  {"I16", v1::INT16},
                                                                  {"I32", v1::INT32},
                                                                  {"I64", v1::INT64},
                                                                  {"BOOL", v1::BOOL},
                                                                  {"F8_E4M3", v1::FLOAT8_E4M3},
                                                                  {"F8_E5M2", v1::FLOAT8_E5M2}};
  auto it = names->find(name);
  if (it == names->end()) return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", name));
  return it->second;
}

// A JSON number that is a whole number in [0, 2^53] (exact as a double).
absl::StatusOr<uint64_t> Whole(const google::protobuf::Value& v, const std::string& what) {
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (v.kind_case() != google::protobuf::Value::kNumberValue || v.number_value() < 0 ||
      v.number_value() > kExact ||
      v.number_value() != static_cast<double>(static_cast<uint64_t>(v.number_value()))) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a whole number in [0, 2^53]"));
  }
  return static_cast<uint64_t>(v.number_value());
}

}  // namespace

absl::StatusOr<std::string> SafetensorsDType(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return std::string("F32");
    case v1::FLOAT16:
      return std::string("F16");
    case v1::BFLOAT16:
      return std::string("BF16");
    case v1::FLOAT64:
      return std::string("F64");
    case v1::INT8:
      return std::string("I8");
    case v1::UINT8:
      return std::string("U8");
    case v1::INT16:
      return std::string("I16");
    case v1::INT32:
      return std::string("I32");
    case v1::INT64:
      return std::string("I64");
    case v1::BOOL:
      return std::string("BOOL");
    case v1::FLOAT8_E4M3:
      return std::string("F8_E4M3");
    case v1::FLOAT8_E5M2:
      return std::string("F8_E5M2");
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
                    absl::StrJoin(e.shape, ","), "],\"data_offsets\":[", e.begin, ",", e.end, "]}");
  }
  json += "}";
  // Padded with spaces so the data starts 8-byte aligned.
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

absl::StatusOr<std::vector<SafetensorsTensor>> ParseSafetensorsHeader(const std::string& head,
                                                                      uint64_t file_size,
                                                                      const std::string& path) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a safetensors file: ", why));
  };
  if (file_size < 8 || head.size() < 8) return bad("shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[i]);
  if (n == 0 || n > kMaxSafetensorsHeader) {
    return bad(absl::StrCat("header length ", n, " is outside [1, ", kMaxSafetensorsHeader, "]"));
  }
  if (n > file_size - 8) return bad(absl::StrCat("header length ", n, " runs past the file"));
  if (head.size() < 8 + n) return bad("header not read whole");
  google::protobuf::Struct header;
  if (auto s = google::protobuf::util::JsonStringToMessage(head.substr(8, n), &header); !s.ok()) {
    return bad(absl::StrCat("header is not a JSON object: ", s.ToString()));
  }
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = file_size - data_start;
  std::vector<SafetensorsTensor> tensors;
  for (const auto& [name, value] : header.fields()) {
    if (name == "__metadata__") continue;
    const std::string who = absl::StrCat("tensor ", name);
    if (value.kind_case() != google::protobuf::Value::kStructValue)
      return bad(absl::StrCat(who, " is not an object"));
    const auto& fields = value.struct_value().fields();
    auto dtype_it = fields.find("dtype");
    auto shape_it = fields.find("shape");
    auto offsets_it = fields.find("data_offsets");
    if (dtype_it == fields.end() || shape_it == fields.end() || offsets_it == fields.end() ||
        dtype_it->second.kind_case() != google::protobuf::Value::kStringValue ||
        shape_it->second.kind_case() != google::protobuf::Value::kListValue ||
        offsets_it->second.kind_case() != google::protobuf::Value::kListValue ||
        offsets_it->second.list_value().values_size() != 2) {
      return bad(
          absl::StrCat(who, " needs dtype (string), shape (list), data_offsets (2 numbers)"));
    }
    SafetensorsTensor t;
    t.name = name;
    absl::StatusOr<v1::DType> dtype = DTypeOf(dtype_it->second.string_value());
    if (!dtype.ok()) return bad(absl::StrCat(who, ": ", dtype.status().message()));
    t.dtype = *dtype;
    const int64_t element = *DTypeSize(t.dtype);
    uint64_t bytes = static_cast<uint64_t>(element);
    for (const google::protobuf::Value& d : shape_it->second.list_value().values()) {
      absl::StatusOr<uint64_t> dim = Whole(d, absl::StrCat(who, ": a dimension"));
      if (!dim.ok()) return bad(std::string(dim.status().message()));
      if (*dim != 0 && bytes > data_size / *dim) {
        return bad(absl::StrCat(who, ": its shape holds more bytes than the file"));
      }
      bytes *= *dim;
      t.shape.push_back(static_cast<int64_t>(*dim));
    }
    if (t.shape.size() > 64) return bad(absl::StrCat(who, ": more than 64 dimensions"));
    absl::StatusOr<uint64_t> begin =
        Whole(offsets_it->second.list_value().values(0), who + ": begin");
    absl::StatusOr<uint64_t> end = Whole(offsets_it->second.list_value().values(1), who + ": end");
    if (!begin.ok()) return bad(std::string(begin.status().message()));
    if (!end.ok()) return bad(std::string(end.status().message()));
    if (*begin > *end || *end > data_size || *end - *begin != bytes) {
      return bad(absl::StrCat(who, ": data_offsets [", *begin, ", ", *end, ") do not hold its ",
                              bytes, " bytes inside the ", data_size, " data bytes"));
    }
    t.begin = data_start + *begin;
    t.end = data_start + *end;
    tensors.push_back(std::move(t));
  }
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].begin < tensors[i - 1].end) {
      return bad(
          absl::StrCat("tensors ", tensors[i - 1].name, " and ", tensors[i].name, " overlap"));
    }
  }
  return tensors;
}

}  // namespace ckpt::ctl
