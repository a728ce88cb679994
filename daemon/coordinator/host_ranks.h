// Which ranks of the jobs spread over hosts each host carries, as its
// heartbeats say (cluster.proto CarriedJob), and which ranks a lost host
// carried. A save or load gathers its hosts' plans until every rank came;
// a host lost before its plan arrived would leave the others waiting for
// the plan timeout. With this the coordinator fails that save or load at
// once, on every host, naming the lost host and its ranks: when the host
// is lost (HostLost), and when a save or load of its job begun later still
// waits for them after a grace (LostFrom; rendezvous.h lost_ranks_grace).
//
// A lost host's ranks stay lost until it registers again, or until a live
// host carries them (the job was restarted without it, and those hosts'
// heartbeats said so within the grace), for the same job and world size.
//
// Thread-safety: all methods are safe from any thread. mu_ is a leaf: no
// call out is made under it, so the gatherings call in under their locks.
#ifndef CKPT_DAEMON_COORDINATOR_HOST_RANKS_H_
#define CKPT_DAEMON_COORDINATOR_HOST_RANKS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "ckpt/v1/cluster.pb.h"

namespace ckpt::coordinator {

class HostRanks {
 public:
  // What a heartbeat may make the coordinator keep, per host.
  static constexpr int kMaxJobs = 64;
  static constexpr int kMaxRanks = 4096;
  // Lost hosts kept: beyond it, the one lost longest ago is forgotten (the
  // registry forgets lost hosts too, and a heartbeat looks at every one).
  static constexpr size_t kMaxLostHosts = 1024;

  // A live host's heartbeat: the jobs it carries now (bad names, world
  // sizes or ranks are skipped; beyond the bounds, cut). Its ranks are
  // lost from no other host any more.
  void Carries(const std::string& host,
               const google::protobuf::RepeatedPtrField<v1::CarriedJob>& jobs);
  // `host` was lost: what it carried is lost, and `reason` says why.
  void Lost(const std::string& host, const std::string& reason);
  // It registered again: nothing of it is lost (nor carried, until its
  // next heartbeat).
  void Registered(const std::string& host);

  // The ranks of (job, world_size) `host` carried, whether it is live or
  // lost; empty when none.
  std::vector<int> RanksOf(const std::string& host, const std::string& job, int world_size) const;

  // A lost host that carried ranks of (job, world_size), other than
  // `except` (ranks the asking host brings itself), with those ranks and
  // why it was lost.
  struct LostCarrier {
    std::string host;
    std::vector<int> ranks;
    std::string reason;
  };
  std::optional<LostCarrier> LostFrom(const std::string& job, int world_size,
                                      absl::Span<const int> except = {}) const;

  // "host H (ranks 6, 7 of N) <reason>": the status a save or load fails
  // with (UNAVAILABLE).
  static absl::Status LostError(const std::string& host, absl::Span<const int> ranks,
                                int world_size, const std::string& reason);

 private:
  struct Job {
    std::string name;
    int world_size = 0;
    std::vector<int> ranks;  // ascending
  };
  // A live host's jobs, from its last heartbeat; a lost host's, with why
  // and when it was lost. Apart, so that heartbeats and the sweeper walk
  // only the lost ones (at most kMaxLostHosts), never every host.
  struct LostHost {
    std::vector<Job> jobs;
    uint64_t order = 0;  // greater is later
    std::string reason;
  };
  mutable absl::Mutex mu_;
  uint64_t lost_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::vector<Job>> live_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, LostHost> lost_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_HOST_RANKS_H_
