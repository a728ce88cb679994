// The durable copy of a memory+durable step of a job spread over hosts, at
// the cluster's coordinator (proto SpreadPersistService). On one host the
// memory tier copies a step to storage and commits it there by itself
// (memory_tier.h Persist); spread over hosts, each host holds only its own
// files (and others' replicas or parity), and one commit must cover them
// all. So, once the step is committed in the hosts' memory:
//
//  1. Each host of the step (its manifest's topology) opens its part here,
//     sending the manifest (the coordinator's memory may have dropped the
//     step by then: it keeps only the newest). The first one starts the
//     copy: a thread runs the durable Coordinator::CommitCopy, whose
//     partial directory (named by this coordinator, so its restart removes
//     it) is where every host writes.
//  2. Each host copies its own data files of the step (data/<host>-*) into
//     it from its memory, checking every chunk's CRC, fsyncs them and
//     reports; the report waits for the end.
//  3. Once every host has reported, and the reported files are every data
//     file of the manifest, CommitCopy commits the step with that manifest
//     (latest only when newer than the latest step on storage).
//
// A host lost (no heartbeat) before it reported, a host's error, the
// deadline or shutdown fails the copy on every host, naming the host, and
// removes the partial directory (again when a late host reports: it may
// have been writing). The step stays committed in memory; the log says
// `spread-persist job=J step=S ... outcome=failed error="..."`.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_TIER_SPREAD_PERSIST_H_
#define CKPT_DAEMON_TIER_SPREAD_PERSIST_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/coordinator.pb.h"
#include "daemon/coordinator/coordinator.h"

namespace ckpt::tier {

struct SpreadPersistOptions {
  // From the first host's open to the last host's report.
  absl::Duration deadline = absl::Minutes(5);
  // Whether a host is registered and heartbeating (null: every host is).
  std::function<bool(const std::string& host)> host_live;
};

// Outcomes, for tests and status.
struct SpreadPersistCounts {
  uint64_t committed = 0;
  uint64_t failed = 0;
  uint64_t in_flight = 0;
};

class SpreadPersists {
 public:
  // `durable` is the coordinator of the shared storage root.
  SpreadPersists(coordinator::Coordinator& durable, SpreadPersistOptions options);
  ~SpreadPersists();  // Stop()

  // Copies in flight at once, and of them started by one host's open: each
  // holds a thread, a manifest and a partial directory for up to the
  // deadline, and a host persists one step at a time.
  static constexpr size_t kMaxInFlight = 256;
  static constexpr size_t kMaxStartedPerHost = 4;

  // Step 1 above: the partial directory (relative to the storage root) and
  // the copy's id. FAILED_PRECONDITION when a copy of another save of the
  // step is in flight or the host is not of the step; the copy's error
  // when it failed already (ALREADY_EXISTS when storage has the step).
  // RESOURCE_EXHAUSTED beyond the bounds above. A host whose manifest is
  // not the one the copy's first host sent fails the copy (ABORTED): one
  // host alone never names what is committed for all.
  absl::StatusOr<v1::SpreadPersistDir> Open(const v1::SpreadPersistOpen& request,
                                            const coordinator::CallerGone& gone = {});
  // Step 2: records the host's files (or its error) and waits for the
  // commit; the step's path on storage, or why the copy failed.
  absl::StatusOr<v1::SpreadPersistResult> Report(const v1::SpreadPersistCopied& request,
                                                 const coordinator::CallerGone& gone = {});
  // Fails every copy in flight ("ckptd is shutting down") and waits for
  // their threads; later calls fail at once. Idempotent.
  void Stop();
  SpreadPersistCounts counts() const;

 private:
  struct Copy {
    std::string id;
    std::string starter;  // the host whose open started it
    v1::CheckpointManifest manifest;
    std::set<std::string> hosts;  // of the step: each reports
    std::set<std::string> files;  // data files with bytes: each reported by its host
    std::map<std::string, std::vector<std::string>> reported;  // host -> its files
    std::string partial;  // once CommitCopy named it (full path)
    absl::Time started;
    absl::Time deadline;
    absl::Status failure;  // the first; fails the copy
    bool ended = false;
    absl::Status outcome;
    std::string path;
    std::thread runner;  // Run; joined once ended
  };
  // The thread of one copy: CommitCopy, then its end.
  void Run(std::shared_ptr<Copy> copy);
  // CommitCopy's `copy`: names the directory, waits for every host.
  absl::Status AwaitHosts(Copy& copy, const std::string& partial);
  // The first unreported host found lost, if any (called without mu_).
  std::string LostHost(const std::vector<std::string>& hosts) const;
  void FailLocked(Copy& copy, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Who(const Copy& copy) const;

  coordinator::Coordinator& durable_;
  const SpreadPersistOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int64_t>, std::shared_ptr<Copy>> by_step_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Copy>> by_id_ ABSL_GUARDED_BY(mu_);
  // Ended copies, newest last, so a late host learns the outcome.
  std::deque<std::shared_ptr<Copy>> ended_ ABSL_GUARDED_BY(mu_);
  static constexpr size_t kEndedKept = 64;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // threads of Run
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  SpreadPersistCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_SPREAD_PERSIST_H_
