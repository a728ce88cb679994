#include "daemon/session/disk_reservations.h"

#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "proto/lib/status_context.h"

namespace ckpt::session {
namespace {

// Reads of the catalog an admission makes while other saves of the job
// release bytes under it; past them it refuses (counting those bytes twice
// errs on the side of the quota).
constexpr int kAdmissionTries = 4;

}  // namespace

absl::Status DecideDiskReservation(const std::string& job, uint64_t committed, uint64_t reserved,
                                   uint64_t asked, uint64_t quota) {
  if (quota == 0) return absl::OkStatus();
  const uint64_t held = committed + reserved;
  const bool overflow = held < committed || held + asked < held;
  if (!overflow && held + asked <= quota) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "job ", job, " holds ", committed, " bytes of committed checkpoints on disk and ", reserved,
      " reserved by its saves in flight; this save asks ", asked, " more, past its quota of ",
      quota,
      " (--job_max_disk_bytes): delete old steps (ckptctl gc), wait for its saves in flight, "
      "or raise the quota"));
}

struct DiskReservations::State {
  struct Job {
    uint64_t reserved = 0;
    // Every byte ever released, so an admission can tell what was released
    // while it read the catalog.
    uint64_t released = 0;
    int reservations = 0;
    int admitting = 0;  // admissions reading the catalog now
  };
  void DropIfIdleLocked(std::map<std::string, Job>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (it->second.reservations == 0 && it->second.admitting == 0) jobs.erase(it);
  }

  mutable absl::Mutex mu;
  // Only jobs with reservations or admissions: the map does not grow with
  // every job name ever saved.
  std::map<std::string, Job> jobs ABSL_GUARDED_BY(mu);
};

DiskReservations::Reservation::Reservation(std::shared_ptr<State> state, std::string job,
                                           uint64_t bytes)
    : state_(std::move(state)), job_(std::move(job)), bytes_(bytes) {}

DiskReservations::Reservation::~Reservation() {
  absl::MutexLock lock(&state_->mu);
  auto it = state_->jobs.find(job_);
  if (it == state_->jobs.end()) return;  // cannot happen: the entry lives while we do
  it->second.reserved -= bytes_;
  it->second.released += bytes_;
  --it->second.reservations;
  state_->DropIfIdleLocked(it);
}

DiskReservations::DiskReservations() : state_(std::make_shared<State>()) {}

DiskReservations::~DiskReservations() = default;

absl::StatusOr<std::unique_ptr<DiskReservations::Reservation>> DiskReservations::Reserve(
    const std::string& job, uint64_t bytes, uint64_t quota, const CommittedBytes& committed) {
  State& s = *state_;
  uint64_t released_before = 0;
  {
    absl::MutexLock lock(&s.mu);
    State::Job& entry = s.jobs[job];
    ++entry.admitting;
    released_before = entry.released;
  }
  absl::Status refusal;
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<uint64_t> on_disk = committed();
    absl::MutexLock lock(&s.mu);
    auto it = s.jobs.find(job);  // held by our admission
    State::Job& entry = it->second;
    if (!on_disk.ok()) {
      --entry.admitting;
      s.DropIfIdleLocked(it);
      return WithContext(on_disk.status(), absl::StrCat("checking job ", job, "'s disk quota"));
    }
    // Released while the catalog was read: perhaps counted there, perhaps
    // not; counted here as still reserved, which never under-counts.
    const uint64_t in_between = entry.released - released_before;
    released_before = entry.released;
    refusal = DecideDiskReservation(job, *on_disk, entry.reserved + in_between, bytes, quota);
    if (refusal.ok()) {
      entry.reserved += bytes;
      ++entry.reservations;
      --entry.admitting;
      return std::make_unique<Reservation>(state_, job, bytes);
    }
    if (in_between == 0 || attempt == kAdmissionTries) {
      --entry.admitting;
      s.DropIfIdleLocked(it);
      return refusal;
    }
  }
}

uint64_t DiskReservations::reserved(const std::string& job) const {
  absl::MutexLock lock(&state_->mu);
  auto it = state_->jobs.find(job);
  return it == state_->jobs.end() ? 0 : it->second.reserved;
}

}  // namespace ckpt::session
