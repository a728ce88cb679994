#include "daemon/planning/plan_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/planning/manifest_footprint.h"

namespace ckpt::planning {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Bytes per entry, from ckpt-plan-bench's phase peaks at 8,192 and 32,768
// ranks (1,000 shards a rank, 8 replicas; the heap trimmed before each
// phase): a save took 60 bytes per shard the hosts list, its plan
// included; a load (the manifest's columns, the plan and its spread over
// the hosts) 560 and 350 bytes per stored chunk with 4 requests each.
// Rounded up.
constexpr uint64_t kSaveBytesPerShard = 72;
constexpr uint64_t kLoadBytesPerRequest = 64;
constexpr uint64_t kLoadBytesPerChunk = 320;
// Whatever the size: tables, the hosts' own entries.
constexpr uint64_t kBytesPerHost = 64 << 10;

}  // namespace

PlanBudget::PlanBudget(uint64_t bytes) : limit_(std::max<uint64_t>(bytes, 1)) {}

PlanBudget::Reservation::~Reservation() {
  if (budget_ != nullptr) budget_->Release(bytes_);
}

PlanBudget::Reservation& PlanBudget::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    if (budget_ != nullptr) budget_->Release(bytes_);
    budget_ = other.budget_;
    bytes_ = other.bytes_;
    other.budget_ = nullptr;
  }
  return *this;
}

absl::StatusOr<PlanBudget::Reservation> PlanBudget::Reserve(uint64_t bytes, absl::string_view what,
                                                            absl::Duration wait) {
  if (bytes > limit_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, " would take about ", (bytes + kMiB - 1) / kMiB,
        " MiB of planning memory, more than --plan_memory_mib allows all plans together (",
        limit_ / kMiB, " MiB): raise it on the coordinator"));
  }
  absl::MutexLock lock(&mu_);
  ++waiting_;
  Want want{this, bytes};
  const bool fits = mu_.AwaitWithTimeout(absl::Condition(&Fits, &want), wait);
  --waiting_;
  if (!fits) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, " waited ", absl::FormatDuration(wait), " for ",
                     (bytes + kMiB - 1) / kMiB, " MiB of planning memory: other plans hold ",
                     in_use_ / kMiB, " of the ", limit_ / kMiB, " MiB --plan_memory_mib allows"));
  }
  in_use_ += bytes;
  return Reservation(this, bytes);
}

bool PlanBudget::Fits(Want* want) {
  return want->budget->in_use_ + want->bytes <= want->budget->limit_;
}

bool PlanBudget::Waiting(Want* want) {
  return static_cast<uint64_t>(want->budget->waiting_) >= want->bytes;
}

void PlanBudget::Release(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_use_ -= bytes;
}

uint64_t PlanBudget::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int PlanBudget::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

void PlanBudget::AwaitWaiting(int count) const {
  absl::MutexLock lock(&mu_);
  Want want{const_cast<PlanBudget*>(this), static_cast<uint64_t>(std::max(count, 0))};
  mu_.Await(absl::Condition(&Waiting, &want));
}

uint64_t SaveScratchBytes(absl::Span<const v1::NodeSavePlan> nodes) {
  uint64_t shards = 0;
  for (const v1::NodeSavePlan& node : nodes) {
    for (const v1::RankSavePlan& rank : node.ranks()) {
      shards += static_cast<uint64_t>(rank.shard_tensors_size()) +
                static_cast<uint64_t>(rank.shards_size()) +
                static_cast<uint64_t>(rank.objects_size());
    }
  }
  return SatAdd(SatMul(shards, kSaveBytesPerShard), SatMul(nodes.size(), kBytesPerHost));
}

uint64_t LoadScratchBytes(absl::Span<const v1::NodeLoadPlan> nodes,
                          const ColumnManifest& manifest) {
  uint64_t requests = 0;
  for (const v1::NodeLoadPlan& node : nodes) {
    for (const v1::NodeLoadPlan::RankRequests& rank : node.ranks()) {
      requests += static_cast<uint64_t>(rank.request_tensors_size()) +
                  static_cast<uint64_t>(rank.tensors_size()) +
                  static_cast<uint64_t>(rank.object_keys_size());
    }
  }
  return SatAdd(
      SatAdd(SatMul(requests, kLoadBytesPerRequest), SatMul(manifest.chunks(), kLoadBytesPerChunk)),
      SatMul(nodes.size(), kBytesPerHost));
}

}  // namespace ckpt::planning
