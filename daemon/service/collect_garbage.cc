#include "daemon/service/collect_garbage.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/lib/validation.h"

namespace ckpt::service {
namespace {

// A grace beyond this is "forever" and only risks overflowing the clock.
constexpr int64_t kMaxGraceSeconds = int64_t{100} * 365 * 86400;

v1::GcStepReport::Outcome ToProto(coordinator::GcStep::Outcome outcome) {
  switch (outcome) {
    case coordinator::GcStep::Outcome::kDeleted:
      return v1::GcStepReport::DELETED;
    case coordinator::GcStep::Outcome::kFailed:
      return v1::GcStepReport::FAILED;
    case coordinator::GcStep::Outcome::kKept:
      break;
  }
  return v1::GcStepReport::KEPT;
}

}  // namespace

absl::StatusOr<v1::CollectGarbageResponse> CollectGarbage(
    coordinator::Coordinator& coordinator, const v1::CollectGarbageRequest& request) {
  const std::string what = absl::StrCat("gc of job ", request.job(), ": ");
  if (absl::Status s = ValidateName("job", request.job()); !s.ok()) return s;
  if (request.keep_last() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "keep-last must be at least 1 (the newest step is never deleted), not ",
                     request.keep_last()));
  }
  if (request.keep_every() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "keep-every must be >= 0, not ", request.keep_every()));
  }
  planning::RetentionPolicy policy;
  policy.keep_last = request.keep_last();
  policy.keep_every = request.keep_every();
  policy.delete_broken = request.delete_broken();
  policy.grace = coordinator.retention().defaults.grace;
  if (request.has_grace_s()) {
    if (request.grace_s() < 0 || request.grace_s() > kMaxGraceSeconds) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "grace must be between 0 and ", kMaxGraceSeconds, " s, not ", request.grace_s()));
    }
    policy.grace = absl::Seconds(request.grace_s());
  }
  absl::StatusOr<coordinator::GcResult> result = coordinator.garbage_collector().Collect(
      request.job(), policy, request.dry_run(), absl::Now(), "ckptctl gc");
  if (!result.ok()) return result.status();
  v1::CollectGarbageResponse response;
  response.set_dry_run(request.dry_run());
  response.set_bytes_freed(result->bytes_freed);
  for (const coordinator::GcStep& step : result->steps) {
    v1::GcStepReport* out = response.add_steps();
    out->set_step(step.step);
    out->set_outcome(ToProto(step.outcome));
    out->set_reason(step.reason);
    out->set_bytes(step.bytes);
  }
  return response;
}

}  // namespace ckpt::service
