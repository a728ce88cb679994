// Which checkpoints of a job garbage collection keeps: a pure function of
// what is on disk and in use, so every rule is tested without a disk.
// retention.h gathers the facts and deletes; this decides.
//
// Rules, for each step (the first that applies is the reason given):
//  - retention off (keep_last 0): kept.
//  - the step LATEST names: kept (a rollback makes a lower step latest).
//  - one of the newest keep_last steps that are not broken: kept. Broken
//    steps do not count: keeping one restores nothing.
//  - a multiple of keep_every: kept (long-term milestones).
//  - in use (a load or an export holds its pin): kept.
//  - committed less than `grace` ago, or at an unknown time: kept. A step
//    just committed may be about to be loaded by someone who resolved it
//    before any pin could be taken.
//  - broken, unless delete_broken: kept. "Broken" may be a transient read
//    error or a manifest over this daemon's limits, so only an operator who
//    asks (ckptctl gc --delete-broken) deletes one, and retention never does.
//  - anything else: deleted.
// Then every step a kept step's deltas are against (its base) is kept too,
// whatever the rules said of it ("the base of step N"): without it the
// kept step cannot be loaded.
#ifndef CKPT_DAEMON_PLANNING_RETENTION_POLICY_H_
#define CKPT_DAEMON_PLANNING_RETENTION_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ckpt::planning {

struct RetentionPolicy {
  int64_t keep_last = 0;   // 0: keep everything (retention off)
  int64_t keep_every = 0;  // 0: no milestones
  absl::Duration grace = absl::Seconds(60);
  bool delete_broken = false;
};

// What gc knows of one step directory.
struct StepFacts {
  int64_t step = 0;
  bool latest = false;
  bool broken = false;
  std::string broken_reason;
  std::optional<absl::Time> committed;  // nullopt: unknown
  // Non-empty: why the step may be in use (its pin is held, or whether it
  // is could not be told); such a step is kept.
  std::string in_use;
  // Its chunks are deltas against this step, which is kept with it.
  std::optional<int64_t> delta_base;
};

struct StepDecision {
  int64_t step = 0;
  bool keep = true;
  std::string reason;  // for people: "latest", "one of the newest 3", ...
};

// One decision per step, in the order given.
std::vector<StepDecision> DecideRetention(const RetentionPolicy& policy,
                                          const std::vector<StepFacts>& steps, absl::Time now);

// The daemon's retention: a default policy and per-job overrides.
struct RetentionConfig {
  RetentionPolicy defaults;
  std::map<std::string, RetentionPolicy> jobs;
  // Who the runs are logged as ("gc of job J (<trigger>)").
  std::string trigger = "retention";

  const RetentionPolicy& For(const std::string& job) const {
    auto it = jobs.find(job);
    return it == jobs.end() ? defaults : it->second;
  }
};

// From ckptd's flags: --retain_last, --retain_every, --retain_grace_s and
// --retention, a comma-separated list of per-job overrides such as
// "jobA:last=3:every=100,jobB:last=10:grace_s=0" (keys last, every, grace_s;
// a key left out takes the flag's value). INVALID_ARGUMENT naming the flag,
// the entry and what is wrong otherwise.
absl::StatusOr<RetentionConfig> ParseRetentionConfig(int64_t retain_last, int64_t retain_every,
                                                     int64_t retain_grace_s,
                                                     absl::string_view overrides);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_RETENTION_POLICY_H_
