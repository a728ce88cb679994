#include "daemon/server/early_step_check.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace ckpt::server {

void EarlyStepChecks::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

void EarlyStepChecks::Begin(const std::string& job, BackgroundTasks& background) {
  const uint64_t generation = tier_.Generation();
  if (generation == tier::MemoryTier::kChanging) return;
  {
    absl::MutexLock lock(&mu_);
    // One at a time on the host, once per job and generation: a client
    // attaching over and over costs no more checks than its commits do.
    if (stopping_ || !running_.empty()) return;
    if (auto it = begun_.find(job); it != begun_.end() && it->second == generation) return;
  }
  // Asked outside mu_: the tier's locks are its own.
  if (tier_.HeldSteps(job).empty()) return;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || !running_.empty()) return;
    PruneLocked(absl::Now());
    if (begun_.size() >= kMaxJobs && begun_.count(job) == 0) begun_.erase(begun_.begin());
    begun_[job] = generation;
    done_.erase(job);
    running_[job] = generation;
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
    // One running of what is held now is nearer its end than a check begun
    // now; one of before a commit here would be of no use.
    auto running_useful = [this, &job]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = running_.find(job);
      return it != running_.end() && it->second == tier_.Generation();
    };
    auto not_running_useful = [&]()
                                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_useful(); };
    mu_.Await(absl::Condition(&not_running_useful));
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
  // What the early check set aside of the same bytes (nothing committed
  // since) is left out of `held` now: still this load's fallbacks.
  if (early.has_value() && early->check.step == now.step &&
      early->generation == tier_.Generation()) {
    now.bad_chunks += early->check.bad_chunks;
  }
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
