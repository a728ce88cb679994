// A node daemon's side of `ckptctl verify` of a memory-tier step spread
// over hosts: the orders the coordinator hands out in heartbeat answers
// (verify_rounds.h) are run one at a time on a thread of their own, so a
// long check never holds up a heartbeat, and each report goes back to the
// coordinator (CoordinatorService.ReportVerify, over the link's channel
// and credentials). At most kMaxQueued orders wait; more are dropped (the
// coordinator then reports the host as not answering).
//
// Thread-safety: Take and SetChannel from any thread.
#ifndef CKPT_DAEMON_CLUSTER_VERIFY_RUNNER_H_
#define CKPT_DAEMON_CLUSTER_VERIFY_RUNNER_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ckpt/v1/coordinator.grpc.pb.h"

namespace ckpt::cluster {

class VerifyRunner {
 public:
  static constexpr size_t kMaxQueued = 8;
  using Check = std::function<v1::HostVerifyReport(const v1::VerifyOrder&)>;

  explicit VerifyRunner(Check check);
  ~VerifyRunner();  // drops the waiting orders, waits for the running one
  VerifyRunner(const VerifyRunner&) = delete;
  VerifyRunner& operator=(const VerifyRunner&) = delete;

  // The coordinator's channel: reports wait for it.
  void SetChannel(std::shared_ptr<grpc::Channel> channel);
  template <typename Orders>
  void Take(const Orders& orders) {
    absl::MutexLock lock(&mu_);
    for (const v1::VerifyOrder& order : orders) {
      if (queue_.size() < kMaxQueued) queue_.push_back(order);
    }
  }

 private:
  void Run();

  const Check check_;
  absl::Mutex mu_;
  std::deque<v1::VerifyOrder> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<v1::CoordinatorService::Stub> stub_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_VERIFY_RUNNER_H_
