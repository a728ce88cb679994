// The coordinator's registry of node daemons: who registered, when each was
// last heard from, and which are lost (no heartbeat within the timeout).
// Time is passed in (a monotonic clock: a stepped wall clock must not lose
// every host at once), so tests drive it without sleeping.
//
// A host is known by its name; a daemon that restarts registers again with
// a new instance id and replaces the old entry. A heartbeat from an
// instance the registry does not hold (the coordinator restarted, or
// declared the host lost) is answered "register again". A lost host stays
// listed, marked lost, until it registers again.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_CLUSTER_HOST_REGISTRY_H_
#define CKPT_DAEMON_CLUSTER_HOST_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/cluster.pb.h"

namespace ckpt::cluster {

struct HostRegistryOptions {
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  size_t max_hosts = 16384;
};

class HostRegistry {
 public:
  explicit HostRegistry(HostRegistryOptions options) : options_(options) {}

  // INVALID_ARGUMENT for a bad name, instance or address; ALREADY_EXISTS
  // while another live instance holds the name; RESOURCE_EXHAUSTED beyond
  // max_hosts when no lost host can make room.
  absl::Status Register(const v1::RegisterHostRequest& request, absl::Time now);
  // Every host is forgotten (a new leader's term): they register again.
  void Clear();
  // false: register again (unknown host, other instance, or lost).
  bool Heartbeat(const v1::HeartbeatRequest& request, absl::Time now);
  // Marks hosts silent past the timeout lost; returns those newly lost.
  std::vector<std::string> ExpireSilent(absl::Time now);
  v1::ClusterStatusResponse Status(absl::Time now) const;
  size_t live_hosts() const;
  // Lost hosts not registered again, at most `max` of them.
  std::vector<std::string> LostHosts(absl::Time now, size_t max) const;
  // Registered, and heard from within the timeout.
  bool Live(const std::string& host, absl::Time now) const;

 private:
  struct Host {
    v1::ClusterHost info;
    absl::Time last_heard;
  };
  // Marked lost, or silent past the timeout (before the sweep marked it).
  bool Lost(const Host& host, absl::Time now) const {
    return host.info.lost() || now - host.last_heard > options_.heartbeat_timeout;
  }
  const HostRegistryOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Host> hosts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::cluster

#endif  // CKPT_DAEMON_CLUSTER_HOST_REGISTRY_H_
