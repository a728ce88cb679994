// Element types of ckpt.v1.DType: sizes and names.
#ifndef CKPT_PROTO_LIB_DTYPE_H_
#define CKPT_PROTO_LIB_DTYPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "ckpt/v1/common.pb.h"

namespace ckpt {

// Bytes per element; INVALID_ARGUMENT for DTYPE_UNSPECIFIED or unknown values.
absl::StatusOr<int64_t> DTypeSize(v1::DType dtype);
std::string DTypeName(v1::DType dtype);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_DTYPE_H_
