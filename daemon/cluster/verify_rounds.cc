#include "daemon/cluster/verify_rounds.h"

#include "absl/strings/str_cat.h"
#include "proto/lib/secure_random.h"

namespace ckpt::cluster {
namespace {

// Reports are cut to what the judge reads (held_files_verify.h's bounds).
constexpr int kMaxFiles = 4096;
constexpr int kMaxFolds = 64;
constexpr size_t kMaxText = 1024;

void Bound(v1::HostVerifyReport& report) {
  while (report.files_size() > kMaxFiles) report.mutable_files()->RemoveLast();
  while (report.folds_size() > kMaxFolds) report.mutable_folds()->RemoveLast();
  for (v1::FileVerdict& f : *report.mutable_files()) {
    if (f.file().size() > kMaxText) f.mutable_file()->resize(kMaxText);
    if (f.detail().size() > kMaxText) f.mutable_detail()->resize(kMaxText);
  }
  if (report.error().size() > kMaxText) report.mutable_error()->resize(kMaxText);
}

}  // namespace

absl::StatusOr<uint64_t> VerifyRounds::Start(std::map<std::string, v1::VerifyOrder> orders,
                                             const std::string& caller) {
  absl::MutexLock lock(&mu_);
  if (rounds_.size() >= kMaxRounds) {
    return absl::ResourceExhaustedError(
        absl::StrCat(kMaxRounds, " verifies of memory-tier steps spread over hosts are running; ",
                     "try again when one ended"));
  }
  size_t mine = 0;
  for (const auto& [id, round] : rounds_) mine += round.caller == caller ? 1 : 0;
  if (mine >= kMaxRoundsPerCaller) {
    return absl::ResourceExhaustedError(absl::StrCat(
        caller, " has ", mine, " verifies of memory-tier steps spread over hosts running; the ",
        "limit per caller is ", kMaxRoundsPerCaller, ": try again when one ended"));
  }
  // Not guessable: a report names its round.
  uint64_t id = 0;
  while (id == 0 || rounds_.contains(id)) FillRandom(&id, sizeof id);
  Round& round = rounds_[id];
  round.caller = caller;
  for (auto& [host, order] : orders) {
    order.set_round(id);
    round.hosts[host].order = std::move(order);
  }
  round.waiting = round.hosts.size();
  return id;
}

absl::Status VerifyRounds::Report(v1::HostVerifyReport report) {
  absl::MutexLock lock(&mu_);
  auto round = rounds_.find(report.round());
  if (round == rounds_.end()) {
    return absl::NotFoundError("no verify round of that id is running (it ended, or never was)");
  }
  auto asked = round->second.hosts.find(report.host().host());
  if (asked == round->second.hosts.end() || asked->second.outcome.reported ||
      !asked->second.outcome.why.empty()) {
    return absl::NotFoundError(absl::StrCat("the verify round did not ask host ",
                                            report.host().host().substr(0, 256),
                                            ", or has its answer"));
  }
  Bound(report);
  asked->second.taken = true;
  asked->second.outcome.reported = true;
  asked->second.outcome.report = std::move(report);
  --round->second.waiting;
  return absl::OkStatus();
}

std::map<std::string, VerifyRounds::Outcome> VerifyRounds::Await(
    uint64_t id, const std::function<bool(const std::string&)>& live, absl::Time pick_up_by,
    absl::Time answer_by, const std::function<bool()>& gone) {
  absl::MutexLock lock(&mu_);
  auto round = rounds_.find(id);
  if (round == rounds_.end()) return {};
  Round& r = round->second;
  auto give_up = [&](Asked& asked, std::string why) {
    asked.outcome.why = std::move(why);
    --r.waiting;
  };
  while (r.waiting > 0) {
    // Reports wake the wait; hosts lost and deadlines are looked at often.
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](size_t* waiting) { return *waiting == 0; }, &r.waiting),
                         absl::Milliseconds(100));
    const bool ended = gone();
    const absl::Time now = absl::Now();
    const bool late = now > pick_up_by;
    const bool silent = now > answer_by;
    for (auto& [host, asked] : r.hosts) {
      if (asked.outcome.reported || !asked.outcome.why.empty()) continue;
      if (!live(host)) {
        give_up(asked, "lost: no heartbeat within the timeout");
      } else if (!asked.taken && late) {
        give_up(asked, "took no verify order in time");
      } else if (silent) {
        give_up(asked, "took its verify order but sent no report in time");
      } else if (ended) {
        give_up(asked, "no answer before the call's deadline");
      }
    }
  }
  std::map<std::string, Outcome> outcomes;
  for (auto& [host, asked] : r.hosts) outcomes[host] = std::move(asked.outcome);
  rounds_.erase(round);
  return outcomes;
}

}  // namespace ckpt::cluster
