#include "daemon/cluster/leader_election.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace ckpt::cluster {
namespace {

// Leadership is timed on the monotonic clock: a wall clock stepped back
// (NTP) must not stretch a lease's validity.
int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
absl::Duration Since(int64_t ns) { return absl::Nanoseconds(MonotonicNs() - ns); }

// How often the leader checks its term, and how long a failed step waits
// before it is tried again.
absl::Duration CheckInterval(absl::Duration ttl) {
  return std::clamp(ttl / 8, absl::Milliseconds(50), absl::Milliseconds(500));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LeaderElection>> LeaderElection::Start(
    EtcdClient& etcd, LeaderElectionOptions options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError(
        "a coordinator that campaigns through etcd needs the address nodes reach it at "
        "(--coordinator_advertise_address, or --listen_address)");
  }
  if (options.lease_ttl < absl::Seconds(2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--etcd_lease_ttl_s: ", absl::FormatDuration(options.lease_ttl),
                     " is below etcd's shortest useful lease (2 s)"));
  }
  std::unique_ptr<LeaderElection> election(new LeaderElection(etcd, std::move(options)));
  election->renewer_ = std::thread([e = election.get()] { e->Renew(); });
  election->thread_ = std::thread([e = election.get()] { e->Run(); });
  return election;
}

LeaderElection::~LeaderElection() { Stop(); }

void LeaderElection::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  campaign_cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
  if (renewer_.joinable()) renewer_.join();
}

bool LeaderElection::leading() const {
  if (!leading_.load(std::memory_order_acquire)) return false;
  const int64_t lease = lease_.load(std::memory_order_acquire);
  if (lease == 0 || gone_lease_.load(std::memory_order_acquire) == lease) return false;
  return Since(renewed_at_ns_.load(std::memory_order_acquire)) < Validity();
}

absl::Status LeaderElection::CheckLeading() const {
  if (leading()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  std::string why = not_leading_;
  if (leading_.load(std::memory_order_acquire)) {
    why = absl::StrCat(
        "its etcd lease was last renewed ",
        absl::FormatDuration(absl::Trunc(Since(renewed_at_ns_.load()), absl::Milliseconds(100))),
        " ago (etcd unreachable, or this process was paused)");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "coordinator ", options_.address, " is not the leader (epoch ", epoch(), "): ", why));
}

void LeaderElection::Renew() {
  // A failed renewal is retried soon: etcd electing a new raft leader (a
  // member lost) refuses renewals for a second or two, and the lease's
  // validity must not run out meanwhile.
  const absl::Duration every = options_.lease_ttl / 4;
  const absl::Duration retry = absl::Milliseconds(100);
  absl::Duration wait = every;
  while (!stop_.WaitForNotificationWithTimeout(wait)) {
    wait = every;
    const int64_t lease = lease_.load(std::memory_order_acquire);
    if (lease == 0) continue;
    const int64_t sent = MonotonicNs();
    absl::StatusOr<absl::Duration> left = etcd_.KeepAlive(lease);
    if (lease_.load(std::memory_order_acquire) != lease) continue;  // a new candidacy
    if (left.ok()) {
      renewed_at_ns_.store(sent, std::memory_order_release);
    } else if (absl::IsNotFound(left.status())) {
      // By lease: a new candidacy's lease is not this one.
      gone_lease_.store(lease, std::memory_order_release);
    } else {
      wait = retry;
    }
  }
}

void LeaderElection::Run() {
  while (!stop_.HasBeenNotified()) {
    Stand();
    // A failed step (etcd unreachable) is tried again after a pause.
    stop_.WaitForNotificationWithTimeout(CheckInterval(options_.lease_ttl));
  }
}

std::string LeaderElection::TermOver(int64_t lease, const EtcdLeaderKey& key) {
  if (gone_lease_.load(std::memory_order_acquire) == lease) {
    return absl::StrFormat("its etcd lease %x expired", lease);
  }
  const absl::Duration since = Since(renewed_at_ns_.load(std::memory_order_acquire));
  if (since >= Validity()) {
    return absl::StrCat("its etcd lease could not be renewed for ",
                        absl::FormatDuration(absl::Trunc(since, absl::Milliseconds(100))),
                        " (etcd unreachable or without quorum, or this process was paused)");
  }
  // Briefly: a frozen etcd must not keep the check from seeing the lease
  // age past its validity.
  absl::StatusOr<std::optional<EtcdCandidate>> leader =
      etcd_.Leader(options_.name, CheckInterval(options_.lease_ttl));
  if (leader.ok() && (!leader->has_value() || (*leader)->key != key.key)) {
    return absl::StrCat("its election key is gone; the leader is ",
                        leader->has_value() ? (*leader)->value : std::string("nobody"));
  }
  return "";  // an unreadable leader: the renewals decide
}

void LeaderElection::Stand() {
  const int64_t asked = MonotonicNs();
  absl::StatusOr<int64_t> lease = etcd_.GrantLease(options_.lease_ttl);
  if (!lease.ok()) {
    absl::MutexLock lock(&mu_);
    if (not_leading_ != lease.status().ToString()) {
      absl::FPrintF(stderr, "ckptd: coordinator election: %s; retrying\n",
                    lease.status().ToString());
    }
    not_leading_ = lease.status().ToString();
    return;
  }
  renewed_at_ns_.store(asked, std::memory_order_release);
  lease_.store(*lease, std::memory_order_release);
  // Bounded: a campaign waiting on a member that lost the quorum may
  // never hear it was elected; it is made again, elsewhere if need be.
  absl::StatusOr<EtcdLeaderKey> key = etcd_.Campaign(options_.name, *lease, options_.address,
                                                     campaign_cancel_, 4 * options_.lease_ttl);
  std::string over = key.ok() ? TermOver(*lease, *key) : key.status().ToString();
  if (!over.empty()) {
    lease_.store(0, std::memory_order_release);
    if (!stop_.HasBeenNotified()) {
      absl::FPrintF(stderr, "ckptd: coordinator election: campaign ended: %s\n", over);
    }
    // Stopping: briefly (the lease lapses by itself).
    (void)etcd_.RevokeLease(
        *lease, stop_.HasBeenNotified() ? absl::Milliseconds(500) : absl::ZeroDuration());
    absl::MutexLock lock(&mu_);
    not_leading_ = std::move(over);
    return;
  }
  epoch_.store(key->revision, std::memory_order_release);
  {
    absl::MutexLock lock(&mu_);
    key_ = *key;
  }
  if (options_.on_elected) options_.on_elected(key->revision);
  leading_.store(true, std::memory_order_release);
  elections_won_.fetch_add(1, std::memory_order_relaxed);
  absl::FPrintF(stderr, "ckptd: coordinator %s leads %s (epoch %d)\n", options_.address,
                options_.name, key->revision);
  while (!stop_.WaitForNotificationWithTimeout(CheckInterval(options_.lease_ttl))) {
    over = TermOver(*lease, *key);
    if (over.empty()) continue;
    leading_.store(false, std::memory_order_release);
    lease_.store(0, std::memory_order_release);
    leases_lost_.fetch_add(1, std::memory_order_relaxed);
    absl::FPrintF(stderr, "ckptd: coordinator %s is no longer the leader (epoch %d): %s\n",
                  options_.address, key->revision, over);
    {
      absl::MutexLock lock(&mu_);
      not_leading_ = absl::StrCat("its term (epoch ", key->revision, ") ended: ", over);
    }
    if (options_.on_deposed) {
      options_.on_deposed(absl::StrCat("coordinator ", options_.address, " stopped leading (epoch ",
                                       key->revision, "): ", over));
    }
    (void)etcd_.RevokeLease(*lease);
    return;
  }
  // Stopping: hand over at once rather than after the lease.
  leading_.store(false, std::memory_order_release);
  lease_.store(0, std::memory_order_release);
  {
    absl::MutexLock lock(&mu_);
    not_leading_ = "it resigned (shutting down)";
  }
  // Briefly, member by member: a shutdown must not wait on an etcd that is
  // gone (the lease then lapses by itself).
  constexpr absl::Duration kStopping = absl::Milliseconds(500);
  (void)etcd_.Resign(*key, kStopping);
  (void)etcd_.RevokeLease(*lease, kStopping);
}

}  // namespace ckpt::cluster
