// A gRPC server interceptor that reports every call answered with a refusal
// code (metrics::IsRefusal: bad input, over a limit, not allowed) to the
// metrics: a counter by method and code, and a rate-limited log line.
// Seeing the final status of every call in one place covers each handler's
// checks, present and future, without a line in each.
//
// Thread-safety: gRPC creates an interceptor per call; Metrics is
// thread-safe.
#ifndef CKPT_DAEMON_SERVICE_REFUSAL_INTERCEPTOR_H_
#define CKPT_DAEMON_SERVICE_REFUSAL_INTERCEPTOR_H_

#include <memory>

#include <grpcpp/support/server_interceptor.h>

#include "daemon/metrics/metrics.h"

namespace ckpt::service {

class RefusalInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RefusalInterceptorFactory(metrics::Metrics& metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  metrics::Metrics& metrics_;
};

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_REFUSAL_INTERCEPTOR_H_
