#include "daemon/server/early_step_check.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace ckpt::server {

void EarlyStepChecks::Begin(const std::string& job, BackgroundTasks& background) {
  // Asked outside mu_: the tier's locks are its own.
  if (tier_.HeldSteps(job).empty()) return;
  const uint64_t generation = tier_.Generation();
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    PruneLocked(now);
    if (running_.count(job) > 0) return;
    // One of what is held now waits for its load; one of before a commit
    // here (ranks that saved a step, then others that load it) is no use.
    auto it = done_.find(job);
    if (it != done_.end() && it->second.generation == generation) return;
    if (it != done_.end()) done_.erase(it);
    running_.insert(job);
  }
  background.Spawn([this, job, generation] {
    HeldSteps held = tier_.HeldSteps(job);
    HeldStepCheck check = CheckHeldStep(tier_, job, -1, held, threads_);
    absl::MutexLock lock(&mu_);
    running_.erase(job);
    done_[job] = Done{std::move(check), generation, absl::Now()};
  });
}

HeldStepCheck EarlyStepChecks::CheckForLoad(const std::string& job, int64_t wanted,
                                            HeldSteps& held) {
  std::optional<Done> early;
  {
    absl::MutexLock lock(&mu_);
    // One running is nearer its end than a check begun now.
    auto not_running = [this, &job]()
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return running_.count(job) == 0; };
    mu_.Await(absl::Condition(&not_running));
    if (auto it = done_.find(job); it != done_.end()) {
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
  // The files the early check set aside are left out of `held` now: their
  // chunks are this load's fallbacks all the same.
  if (early.has_value() && early->check.step == now.step) now.bad_chunks += early->check.bad_chunks;
  return now;
}

bool EarlyStepChecks::Covers(const Done& done, int64_t wanted, const HeldSteps& held) const {
  if (done.check.step < 0 || done.generation != tier_.Generation()) return false;
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
    it = now - it->second.ended > fresh_for_ ? done_.erase(it) : std::next(it);
  }
}

}  // namespace ckpt::server
