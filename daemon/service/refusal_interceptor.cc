#include "daemon/service/refusal_interceptor.h"

#include <string>

#include <grpcpp/server_context.h>

namespace ckpt::service {
namespace {

class RefusalInterceptor : public grpc::experimental::Interceptor {
 public:
  RefusalInterceptor(grpc::experimental::ServerRpcInfo* info, metrics::Metrics& metrics)
      : info_(info), metrics_(metrics) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      // gRPC's and Abseil's codes are the same numbers.
      const auto code = static_cast<absl::StatusCode>(status.error_code());
      if (metrics::IsRefusal(code)) {
        grpc::ServerContextBase* context = info_->server_context();
        metrics_.Refused(info_->method(), code, status.error_message(),
                         context != nullptr ? context->peer() : std::string());
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
  metrics::Metrics& metrics_;
};

}  // namespace

grpc::experimental::Interceptor* RefusalInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new RefusalInterceptor(info, metrics_);
}

}  // namespace ckpt::service
