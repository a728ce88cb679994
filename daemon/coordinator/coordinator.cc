#include "daemon/coordinator/coordinator.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {

Coordinator::Coordinator(storage::Backend& backend, std::string root,
                         planning::SavePlannerOptions options, CatalogOptions catalog,
                         RendezvousOptions rendezvous)
    : backend_(backend),
      catalog_(backend, std::move(root), std::move(catalog)),
      saves_(backend, catalog_, host_ranks_, options, rendezvous),
      committer_(backend, catalog_),
      loads_(backend, catalog_, host_ranks_, options, rendezvous) {}

void Coordinator::EnableRetention(planning::RetentionConfig config) {
  committer_.EnableRetention(std::move(config));
}

uint64_t Coordinator::barrier_skips() const { return saves_.barrier_skips(); }

size_t Coordinator::saves_in_flight() const { return saves_.saves_in_flight(); }

absl::StatusOr<v1::SaveAssignment> Coordinator::PlanSave(const v1::NodeSavePlan& node,
                                                         const CallerGone& gone) {
  return saves_.PlanSave(node, gone);
}

absl::StatusOr<v1::CommitResult> Coordinator::ReportPersisted(const v1::NodePersistReport& report,
                                                              const CallerGone& gone) {
  absl::StatusOr<SaveGathering::Reported> reported = saves_.Report(report);
  if (!reported.ok()) return reported.status();
  if (!reported->last) return saves_.AwaitCommit(reported->save, report.host().host(), gone);
  // The last report commits, with no lock of the gathering held: the
  // others wait on the save's end (Committed).
  std::string manifest;
  const absl::Status status =
      committer_.CommitSave(reported->plan, reported->created_unix_ms, *reported->reports,
                            reported->partial_dir, saves_.memory_cluster() ? &manifest : nullptr,
                            [&] { return saves_.PassCommitPoint(reported->save); });
  absl::StatusOr<v1::CommitResult> result =
      saves_.Committed(*reported, status, std::move(manifest));
  if (result.ok()) committer_.Retain(reported->job);
  return result;
}

absl::StatusOr<std::string> Coordinator::CommitCopy(
    const v1::CheckpointManifest& manifest,
    const std::function<absl::Status(const std::string& partial_dir)>& copy) {
  if (saves_.SaveInFlight(manifest.job(), manifest.step())) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", manifest.step(), " of job ", manifest.job(), " is being saved here"));
  }
  return committer_.CommitCopy(manifest, copy);
}

bool Coordinator::AbortSave(const v1::AbortSaveRequest& request) {
  return saves_.AbortSave(request);
}

void Coordinator::AbortSave(const std::string& save_id, const std::string& reason) {
  v1::AbortSaveRequest request;
  request.set_save_id(save_id);
  request.set_reason(reason);
  saves_.AbortSave(request);
}

void Coordinator::HostCarries(const std::string& host,
                              const google::protobuf::RepeatedPtrField<v1::CarriedJob>& jobs) {
  host_ranks_.Carries(host, jobs);
}

void Coordinator::HostLost(const std::string& host, const std::string& reason) {
  host_ranks_.Lost(host, reason);
  // Loads first: saves' partial directories are removed before it returns.
  loads_.HostLost(host, reason);
  saves_.HostLost(host, reason);
}

void Coordinator::HostRegistered(const std::string& host) {
  host_ranks_.Registered(host);
  saves_.HostRegistered(host);
  loads_.HostRegistered(host);
}

void Coordinator::AbortAll(const std::string& reason) {
  loads_.AbortAll(absl::UnavailableError(reason));
  saves_.AbortAll(absl::UnavailableError(reason));
}

void Coordinator::ExpireSaves(absl::Time now) {
  saves_.ExpireSaves(now);
  loads_.ExpireLoads(now);
}

std::vector<std::pair<std::string, std::string>> Coordinator::FailedSaves(
    absl::Span<const std::string> save_ids) {
  return saves_.FailedSaves(save_ids);
}

bool Coordinator::KnowsSave(const std::string& save_id) const { return saves_.KnowsSave(save_id); }

bool Coordinator::SaveInFlight(const std::string& job, int64_t step) const {
  return saves_.SaveInFlight(job, step);
}

absl::StatusOr<v1::LoadAssignment> Coordinator::PlanLoad(const v1::NodeLoadPlan& node,
                                                         std::unique_ptr<storage::FileLock>* pin) {
  return loads_.PlanLoad(node, pin);
}

absl::StatusOr<v1::LoadAssignment> Coordinator::PlanSpanningLoad(const v1::NodeLoadPlan& node,
                                                                 const CallerGone& gone) {
  return loads_.PlanSpanningLoad(node, gone);
}

size_t Coordinator::loads_gathering() const { return loads_.loads_gathering(); }

}  // namespace ckpt::coordinator
