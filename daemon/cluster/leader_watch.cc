#include "daemon/cluster/leader_watch.h"

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace ckpt::cluster {
namespace {

constexpr char kBadAddress[] = "the leader's address in etcd is no host:port";

// host:port (or [v6]:port), short, of the characters such names use.
bool PlausibleAddress(const std::string& address) {
  if (address.empty() || address.size() > 255) return false;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  for (char c : address) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' &&
        c != '[' && c != ']' && c != '_') {
      return false;
    }
  }
  for (size_t i = colon + 1; i < address.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(address[i]))) return false;
  }
  return true;
}

}  // namespace

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
      const bool was_bad = etcd_error_ == kBadAddress;
      etcd_error_.clear();
      if (asked->has_value()) {
        now = {(*asked)->value, (*asked)->create_revision};
        if (!PlausibleAddress(now.address)) {
          // Written by someone other than a coordinator: no address to
          // send this host's token to.
          if (!was_bad) {
            absl::FPrintF(stderr,
                          "ckptd: etcd names a coordinator leader whose address (%d bytes) is "
                          "no host:port; following none\n",
                          now.address.size());
          }
          etcd_error_ = kBadAddress;
          now = {};
        }
      }
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
    // Only this thread writes it, and never lowers it (above).
    if (now.epoch > highest_epoch()) highest_epoch_.store(now.epoch, std::memory_order_release);
    if (options_.on_change) options_.on_change(before, now);
  } while (!stop_.WaitForNotificationWithTimeout(options_.poll));
}

}  // namespace ckpt::cluster
