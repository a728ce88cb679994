#include "proto/lib/dtype.h"

#include "absl/strings/str_cat.h"

namespace ckpt {

absl::StatusOr<int64_t> DTypeSize(v1::DType dtype) {
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
    case v1::INT8:
    case v1::UINT8:
    case v1::BOOL:
    case v1::FLOAT8_E4M3:
    case v1::FLOAT8_E5M2:
      return 1;
    default:
      return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", DTypeName(dtype)));
  }
}

std::string DTypeName(v1::DType dtype) {
  if (v1::DType_IsValid(dtype)) return v1::DType_Name(dtype);
  return absl::StrCat("dtype(", static_cast<int>(dtype), ")");
}

}  // namespace ckpt
