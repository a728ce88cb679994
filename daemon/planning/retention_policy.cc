#include "daemon/planning/retention_policy.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/lib/validation.h"

namespace ckpt::planning {
namespace {

// Past this a grace period means "forever" and only risks overflow.
constexpr int64_t kMaxGraceSeconds = int64_t{100} * 365 * 86400;

std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToInt64Seconds(d), "s"); }

absl::Status CheckPolicy(const RetentionPolicy& p, absl::string_view where) {
  if (p.keep_last < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "last must be >= 0, not ", p.keep_last));
  }
  if (p.keep_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "every must be >= 0, not ", p.keep_every));
  }
  if (p.grace < absl::ZeroDuration() || p.grace > absl::Seconds(kMaxGraceSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "grace_s must be between 0 and ",
                                                   kMaxGraceSeconds, ", not ",
                                                   absl::ToInt64Seconds(p.grace)));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<StepDecision> DecideRetention(const RetentionPolicy& policy,
                                          const std::vector<StepFacts>& steps, absl::Time now) {
  std::vector<int64_t> valid;
  for (const StepFacts& f : steps) {
    if (!f.broken) valid.push_back(f.step);
  }
  std::sort(valid.begin(), valid.end());
  const size_t newest_count =
      std::min(valid.size(), static_cast<size_t>(std::max<int64_t>(policy.keep_last, 0)));
  const std::set<int64_t> newest(valid.end() - static_cast<std::ptrdiff_t>(newest_count),
                                 valid.end());

  std::vector<StepDecision> out;
  out.reserve(steps.size());
  for (const StepFacts& f : steps) {
    StepDecision& d = out.emplace_back();
    d.step = f.step;
    if (policy.keep_last <= 0) {
      d.reason = "retention is off (keep-last 0)";
    } else if (f.latest) {
      d.reason = "latest";
    } else if (newest.count(f.step) > 0) {
      d.reason = absl::StrCat("one of the newest ", policy.keep_last);
    } else if (policy.keep_every > 0 && f.step % policy.keep_every == 0) {
      d.reason = absl::StrCat("a multiple of ", policy.keep_every);
    } else if (!f.in_use.empty()) {
      d.reason = f.in_use;
    } else if (!f.committed.has_value()) {
      d.reason = "its commit time is unknown";
    } else if (now - *f.committed < policy.grace) {
      d.reason =
          absl::StrCat("committed ", Seconds(std::max(now - *f.committed, absl::ZeroDuration())),
                       " ago, within the grace period of ", Seconds(policy.grace));
    } else if (f.broken && !policy.delete_broken) {
      d.reason = absl::StrCat("broken (", f.broken_reason,
                              "); only ckptctl gc --delete-broken deletes a broken step");
    } else {
      d.keep = false;
      d.reason = f.broken
                     ? absl::StrCat("broken (", f.broken_reason, ")")
                     : absl::StrCat("older than the newest ", policy.keep_last,
                                    policy.keep_every > 0
                                        ? absl::StrCat(" and not a multiple of ", policy.keep_every)
                                        : "");
    }
  }
  // Bases of kept steps: a delta is only as loadable as its base.
  std::map<int64_t, StepDecision*> by_step;
  for (StepDecision& d : out) by_step[d.step] = &d;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!out[i].keep || !steps[i].delta_base.has_value()) continue;
    auto base = by_step.find(*steps[i].delta_base);
    if (base == by_step.end() || base->second->keep) continue;
    base->second->keep = true;
    base->second->reason = absl::StrCat("the base of step ", steps[i].step);
  }
  return out;
}

absl::StatusOr<RetentionConfig> ParseRetentionConfig(int64_t retain_last, int64_t retain_every,
                                                     int64_t retain_grace_s,
                                                     absl::string_view overrides) {
  RetentionConfig config;
  config.defaults.keep_last = retain_last;
  config.defaults.keep_every = retain_every;
  if (retain_grace_s < 0 || retain_grace_s > kMaxGraceSeconds) {
    return absl::InvalidArgumentError(absl::StrCat("--retain_grace_s must be between 0 and ",
                                                   kMaxGraceSeconds, ", not ", retain_grace_s));
  }
  config.defaults.grace = absl::Seconds(retain_grace_s);
  if (retain_last < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retain_last must be >= 0 (0: keep every step), not ", retain_last));
  }
  if (retain_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--retain_every must be >= 0 (0: none), not ", retain_every));
  }
  if (overrides.empty()) return config;
  for (absl::string_view entry : absl::StrSplit(overrides, ',')) {
    const std::string where = absl::StrCat("--retention entry \"", entry, "\": ");
    std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    const std::string job(parts[0]);
    if (absl::Status s = ValidateName("job", job); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
    }
    if (parts.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "want JOB:last=N[:every=K][:grace_s=S]"));
    }
    if (config.jobs.count(job) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, "job ", job, " is named twice"));
    }
    RetentionPolicy policy = config.defaults;
    std::set<std::string> seen;
    for (size_t i = 1; i < parts.size(); ++i) {
      std::pair<std::string, std::string> kv = absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
      int64_t value = 0;
      if (!absl::SimpleAtoi(kv.second, &value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "\"", parts[i], "\" is not KEY=INTEGER (keys: last, every, grace_s)"));
      }
      if (!seen.insert(kv.first).second) {
        return absl::InvalidArgumentError(absl::StrCat(where, kv.first, " is given twice"));
      }
      if (kv.first == "last") {
        policy.keep_last = value;
      } else if (kv.first == "every") {
        policy.keep_every = value;
      } else if (kv.first == "grace_s") {
        if (value < 0 || value > kMaxGraceSeconds) {
          return absl::InvalidArgumentError(absl::StrCat(where, "grace_s must be between 0 and ",
                                                         kMaxGraceSeconds, ", not ", value));
        }
        policy.grace = absl::Seconds(value);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "unknown key \"", kv.first, "\" (keys: last, every, grace_s)"));
      }
    }
    if (absl::Status s = CheckPolicy(policy, where); !s.ok()) return s;
    config.jobs[job] = policy;
  }
  return config;
}

}  // namespace ckpt::planning
