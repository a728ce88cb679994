// The one place where absl::Status and grpc::Status convert into each other.
#ifndef CKPT_PROTO_LIB_GRPC_STATUS_H_
#define CKPT_PROTO_LIB_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace ckpt {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_GRPC_STATUS_H_
