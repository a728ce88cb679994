#include "daemon/cluster/leader_watch.h"

#include <cstdio>

#include "absl/strings/str_format.h"

namespace ckpt::cluster {

LeaderWatch::LeaderWatch(EtcdClient& etcd, LeaderWatchOptions options)
    : etcd_(etcd), options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

LeaderWatch::~LeaderWatch() { Stop(); }

void LeaderWatch::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

CoordinatorLeader LeaderWatch::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

std::string LeaderWatch::etcd_error() const {
  absl::MutexLock lock(&mu_);
  return etcd_error_;
}

void LeaderWatch::SawEpoch(int64_t epoch) {
  int64_t seen = highest_epoch_.load(std::memory_order_acquire);
  while (epoch > seen && !highest_epoch_.compare_exchange_weak(seen, epoch)) {
  }
}

void LeaderWatch::Run() {
  do {
    absl::StatusOr<std::optional<EtcdCandidate>> asked = etcd_.Leader(options_.name);
    CoordinatorLeader now;
    {
      absl::MutexLock lock(&mu_);
      if (!asked.ok()) {
        // etcd unreachable: keep following the leader we know (it may well
        // be alive); its own lease decides whether it still leads.
        if (etcd_error_ != asked.status().ToString()) {
          absl::FPrintF(stderr, "ckptd: cannot ask etcd who leads the coordinators: %s\n",
                        asked.status().ToString());
        }
        etcd_error_ = asked.status().ToString();
        continue;
      }
      etcd_error_.clear();
      if (asked->has_value()) now = {(*asked)->value, (*asked)->create_revision};
      if (now == leader_) continue;
    }
    // A lower epoch than seen: a stale member's answer; wait for a fresh one.
    if (!now.address.empty() && now.epoch < highest_epoch()) continue;
    CoordinatorLeader before;
    {
      absl::MutexLock lock(&mu_);
      before = leader_;
      leader_ = now;
    }
    SawEpoch(now.epoch);
    if (options_.on_change) options_.on_change(before, now);
  } while (!stop_.WaitForNotificationWithTimeout(options_.poll));
}

}  // namespace ckpt::cluster
