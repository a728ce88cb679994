#include "daemon/tier/early_step_check.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

namespace ckpt::tier {

void EarlyStepChecks::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

void EarlyStepChecks::Begin(const std::string& job, bool spread,
                            exec::BackgroundTasks& background) {
  const uint64_t generation = tier_.Generation();
  if (generation == tier::MemoryTier::kChanging) return;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || !running_.empty()) return;
  }
  // Asked outside mu_: the tier's locks are its own.
  const HeldSteps held = tier_.HeldSteps(job);
  if (held.empty()) return;
  Begun begun{spread ? generation : 0, -1, spread};
  for (const auto& [step, files] : held) begun.newest = std::max(begun.newest, step);
  {
    absl::MutexLock lock(&mu_);
    // One at a time on the host, once per job and newest step (Begun).
    if (stopping_ || !running_.empty()) return;
    if (auto it = begun_.find(job); it != begun_.end() && it->second.Same(begun)) return;
    PruneLocked(absl::Now());
    if (begun_.size() >= kMaxJobs && begun_.count(job) == 0) begun_.erase(begun_.begin());
    begun_[job] = begun;
    done_.erase(job);
    running_[job] = begun;
  }
  background.Spawn([this, job, begun] {
    const absl::Time start = absl::Now();
    HeldSteps held = tier_.HeldSteps(job);
    HeldStepCheck check =
        CheckHeldStep(tier_, job, -1, held, threads_,
                      begun.spread ? BadFiles::kSetAside : BadFiles::kLeaveToLoad);
    uint64_t bytes = 0;
    for (const auto& [name, stamp] : check.verified) bytes += stamp.size;
    std::fprintf(stderr,
                 "ckptd: memory-check job=%s step=%lld verified=%zu bytes=%llu duration_s=%.3f "
                 "(as a rank attached)\n",
                 job.c_str(), static_cast<long long>(check.step), check.verified.size(),
                 static_cast<unsigned long long>(bytes),
                 absl::ToDoubleSeconds(absl::Now() - start));
    absl::MutexLock lock(&mu_);
    running_.erase(job);
    done_[job] = Done{std::move(check), begun, absl::Now()};
  });
}

HeldStepCheck EarlyStepChecks::CheckForLoad(const std::string& job, int64_t wanted,
                                            HeldSteps& held) {
  std::optional<Done> early;
  {
    absl::MutexLock lock(&mu_);
    // One running of what is held now is nearer its end than a check begun
    // now; one of before a commit here would be of no use.
    auto running_useful = [this, &job]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = running_.find(job);
      return it != running_.end() && it->second.spread &&
             it->second.generation == tier_.Generation();
    };
    auto not_running_useful = [&]()
                                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_useful(); };
    mu_.Await(absl::Condition(&not_running_useful));
    if (auto it = done_.find(job); it != done_.end() && it->second.begun.spread) {
      early = std::move(it->second);
      done_.erase(it);
    }
  }
  held = tier_.HeldSteps(job);
  if (early.has_value() && Covers(*early, wanted, held)) {
    absl::MutexLock lock(&mu_);
    ++used_;
    return std::move(early->check);
  }
  HeldStepCheck now = CheckHeldStep(tier_, job, wanted, held, threads_);
  // What the early check set aside of the same bytes (nothing committed
  // since) is left out of `held` now: still this load's fallbacks.
  if (early.has_value() && early->check.step == now.step &&
      early->begun.generation == tier_.Generation()) {
    now.bad_chunks += early->check.bad_chunks;
  }
  return now;
}

std::map<std::string, FileStamp> EarlyStepChecks::VerifiedFiles(const std::string& job,
                                                                int64_t step) {
  absl::MutexLock lock(&mu_);
  auto not_running = [this, &job]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_.count(job) == 0; };
  mu_.Await(absl::Condition(&not_running));
  auto it = done_.find(job);
  if (it == done_.end() || it->second.begun.spread || it->second.check.step != step ||
      absl::Now() - it->second.ended > trusted_for_) {
    return {};
  }
  return it->second.check.verified;
}

bool EarlyStepChecks::Covers(const Done& done, int64_t wanted, const HeldSteps& held) const {
  if (done.check.step < 0 || done.begun.generation != tier_.Generation()) return false;
  if (absl::Now() - done.ended > fresh_for_) return false;
  int64_t step = wanted;
  if (step < 0) {
    for (const auto& [s, files] : held) step = std::max(step, s);
  }
  if (step != done.check.step) return false;
  for (const auto& [s, files] : held) {
    if (s != step) continue;
    return std::all_of(files.begin(), files.end(), [&](const std::string& file) {
      return done.check.verified.count(file) > 0;
    });
  }
  return false;
}

void EarlyStepChecks::PruneLocked(absl::Time now) {
  for (auto it = done_.begin(); it != done_.end();) {
    it = now - it->second.ended > KeptFor(it->second) ? done_.erase(it) : std::next(it);
  }
}

}  // namespace ckpt::tier
