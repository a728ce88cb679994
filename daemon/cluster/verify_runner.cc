#include "daemon/cluster/verify_runner.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"

namespace ckpt::cluster {

VerifyRunner::VerifyRunner(Check check) : check_(std::move(check)) {
  thread_ = std::thread([this] { Run(); });
}

VerifyRunner::~VerifyRunner() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    queue_.clear();
  }
  thread_.join();
}

void VerifyRunner::SetChannel(std::shared_ptr<grpc::Channel> channel) {
  absl::MutexLock lock(&mu_);
  stub_ = v1::CoordinatorService::NewStub(std::move(channel));
}

void VerifyRunner::Run() {
  for (;;) {
    v1::VerifyOrder order;
    // The leader's now: a new leader replaces it, and a report in flight
    // keeps the old one until it ends.
    std::shared_ptr<v1::CoordinatorService::Stub> stub;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](VerifyRunner* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
            return r->stop_ || (!r->queue_.empty() && r->stub_ != nullptr);
          },
          this));
      if (stop_) return;
      order = std::move(queue_.front());
      queue_.pop_front();
      stub = stub_;
    }
    const v1::HostVerifyReport report = check_(order);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ReportVerifyResponse response;
    const grpc::Status status = stub->ReportVerify(&context, report, &response);
    if (!status.ok()) {
      absl::FPrintF(stderr,
                    "ckptd: verify of job %s step %d: the report did not reach the "
                    "coordinator: %s\n",
                    order.job(), order.step(), status.error_message());
    }
  }
}

}  // namespace ckpt::cluster
