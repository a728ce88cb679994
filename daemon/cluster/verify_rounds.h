// The coordinator's rounds of `ckptctl verify` of a memory-tier step spread
// over hosts: a round holds one VerifyOrder per live host; each host takes
// its order from the answer to its next heartbeat (ClusterService) and
// reports back (CoordinatorService.ReportVerify); the verify call waits
// for every report, or until the host is lost, took no order within the
// pick-up time, or the call ends. Nothing grows without bound: at most
// kMaxRounds at once, an order handed out once, a report taken once per
// host asked and only in a round that asked it.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_CLUSTER_VERIFY_ROUNDS_H_
#define CKPT_DAEMON_CLUSTER_VERIFY_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/coordinator.pb.h"

namespace ckpt::cluster {

class VerifyRounds {
 public:
  static constexpr size_t kMaxRounds = 8;
  // Of them, one caller's (a principal): none can take them all.
  static constexpr size_t kMaxRoundsPerCaller = 2;
  static constexpr int kMaxOrdersPerAnswer = 4;

  // What became of one host asked.
  struct Outcome {
    bool reported = false;
    std::string why;  // when not: lost, never took the order, no answer in time
    v1::HostVerifyReport report;
  };

  // Starts a round of `orders` (by host; each order's round is set here)
  // for `caller`. RESOURCE_EXHAUSTED with kMaxRounds running, or
  // kMaxRoundsPerCaller of the caller's.
  absl::StatusOr<uint64_t> Start(std::map<std::string, v1::VerifyOrder> orders,
                                 const std::string& caller);
  // Hands `host` the orders waiting for it (each once), at most
  // kMaxOrdersPerAnswer.
  template <typename Add>
  void TakeOrders(const std::string& host, Add add) {
    absl::MutexLock lock(&mu_);
    int given = 0;
    for (auto& [id, round] : rounds_) {
      auto it = round.hosts.find(host);
      if (it == round.hosts.end() || it->second.taken) continue;
      if (given++ == kMaxOrdersPerAnswer) break;
      it->second.taken = true;
      add(it->second.order);
    }
  }
  // A host's report. NOT_FOUND unless a running round asked that host and
  // has no report from it yet.
  absl::Status Report(v1::HostVerifyReport report);
  // Waits for the round's reports and ends it. `live(host)`: whether the
  // registry still holds the host live; a host that took no order by
  // `pick_up_by`, sent no report by `answer_by` (its one report may be
  // lost), or is lost, is given up; so is every host once `gone()`.
  std::map<std::string, Outcome> Await(uint64_t round,
                                       const std::function<bool(const std::string&)>& live,
                                       absl::Time pick_up_by, absl::Time answer_by,
                                       const std::function<bool()>& gone);

 private:
  struct Asked {
    v1::VerifyOrder order;
    bool taken = false;
    Outcome outcome;
  };
  struct Round {
    std::string caller;
    std::map<std::string, Asked> hosts;
    size_t waiting = 0;  // hosts without an outcome
  };
  absl::Mutex mu_;
  std::map<uint64_t, Round> rounds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_VERIFY_ROUNDS_H_
