#include "daemon/coordinator/save_gathering.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/commit.h"
#include "daemon/coordinator/partial_dir.h"
#include "daemon/fault/fault_points.h"
#include "daemon/planning/rank_barrier.h"
#include "daemon/planning/replica_placement.h"
#include "daemon/storage/layout.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/lib/compact_plan.h"
#include "proto/lib/secure_random.h"
#include "proto/lib/status_context.h"

namespace ckpt::coordinator {

// A save between the first host's plan and its end. Fields other than the
// gathered plans are guarded by the gathering's mu_; the plans are written
// only while gathering and read by the one planner after; the plan and the
// reports are fixed once it is committing.
struct SaveGathering::ActiveSave {
  enum class Phase { kGathering, kPlanning, kWriting, kCommitting, kCommitted, kFailed };
  ActiveSave(int world_size, absl::Time now, absl::Time plan_deadline)
      : ranks(world_size, world_size, plan_deadline), started(now), deadline(plan_deadline) {}
  std::string save_id;
  std::string job;
  int64_t step = 0;
  planning::RankBarrier ranks;  // every rank of the world, once
  Phase phase = Phase::kGathering;
  absl::Time started;                        // its first host's plan
  absl::Time deadline;                       // for gathering, then for writing
  std::vector<v1::NodeSavePlan> nodes;       // read by the planner without mu_
  bool planner_busy = false;                 // so they stay until it is done
  std::map<std::string, size_t> node_index;  // by host name
  planning::SavePlan plan;                   // all hosts'
  int64_t created_unix_ms = 0;               // when it was planned
  std::string partial_dir;                   // absolute
  // The commit may have landed (CommitOutcomeUnknown): its files stay for
  // a restart to judge, whatever else fails the save.
  bool keep_partial = false;
  std::map<std::string, v1::NodePersistReport> reports;  // by host name
  // Hosts answered at once from the job's known layout, with the part they
  // got: the plan made once all arrive must give them the same.
  Parts early;
  uint64_t early_chunk_bytes = 0;
  Parts parts;                                     // by host, once planned
  std::map<std::string, std::string> layout_keys;  // by host (planning::HostPlanKey)
  absl::Status error;
  v1::CommitResult result;
  // While committing: a host lost before the commit's point of no return
  // vetoes it (commit_point_mu is a leaf, taken by the committer without
  // mu_). The waiting hosts fail with the veto at once.
  absl::Mutex commit_point_mu;
  absl::Status veto ABSL_GUARDED_BY(commit_point_mu);
  bool commit_point_passed ABSL_GUARDED_BY(commit_point_mu) = false;
  // A memory-tier save spread over hosts (ServeClusterMemoryTier): each
  // host's copies, and the manifest's planned size.
  std::map<std::string, v1::ReplicaPlan> replicas;
  std::map<std::string, v1::ErasurePlan> erasure;
  uint64_t manifest_bytes = 0;
  int world_size() const { return ranks.world_size(); }
  bool ended() const { return phase == Phase::kCommitted || phase == Phase::kFailed; }
  std::string Who() const { return absl::StrCat("save of job ", job, " step ", step); }
};

SaveGathering::SaveGathering(storage::Backend& backend, Catalog& catalog, HostRanks& host_ranks,
                             planning::SavePlannerOptions options, RendezvousOptions rendezvous)
    : backend_(backend),
      catalog_(catalog),
      host_ranks_(host_ranks),
      options_([&] {
        planning::SavePlannerOptions o = options;
        // Kept alive by rendezvous_, which holds the budget too.
        o.budget = rendezvous.plan_budget.get();
        o.budget_wait = rendezvous.plan_timeout;
        return o;
      }()),
      rendezvous_([&] {
        RendezvousOptions r = rendezvous;
        // EndLocked erases the oldest ended save: never the one ending.
        r.ended_saves_kept = std::max<size_t>(r.ended_saves_kept, 1);
        return r;
      }()),
      plan_cache_(rendezvous.plan_cache_bytes) {}

SaveGathering::SaveRef SaveGathering::FindLocked(const std::string& save_id) {
  auto it = saves_.find(save_id);
  return it == saves_.end() ? nullptr : it->second;
}

bool SaveGathering::FailLocked(ActiveSave& save, const absl::Status& error) {
  if (save.ended() || save.phase == ActiveSave::Phase::kCommitting) return false;
  save.error = error;
  save.phase = ActiveSave::Phase::kFailed;
  EndLocked(save);
  return true;
}

void SaveGathering::EndLocked(ActiveSave& save) {
  // Only what late callers need is kept: the outcome, not the plans.
  if (!save.planner_busy) std::vector<v1::NodeSavePlan>().swap(save.nodes);
  save.reports.clear();
  save.early.clear();
  save.plan = planning::SavePlan();
  ended_.push_back(save.save_id);
  while (ended_.size() > rendezvous_.ended_saves_kept) {
    saves_.erase(ended_.front());
    ended_.pop_front();
  }
}

uint64_t SaveGathering::barrier_skips() const {
  absl::MutexLock lock(&mu_);
  return barrier_skips_;
}

size_t SaveGathering::saves_in_flight() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, save] : saves_) n += save->ended() ? 0 : 1;
  return n;
}

absl::StatusOr<SaveGathering::SaveRef> SaveGathering::JoinSave(const v1::NodeSavePlan& node,
                                                               bool* plan_it, bool* early) {
  if (absl::Status s = planning::ValidateSaveHeader(node, options_); !s.ok()) return s;
  const std::string& host = node.host().host();
  if (node.ranks_size() == 0 || node.ranks_size() > node.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("host ", host, " sent ", node.ranks_size(),
                                                   " ranks of a world of ", node.world_size()));
  }
  absl::StatusOr<bool> exists = catalog_.StepExists(node.job(), node.step());
  if (!exists.ok()) return exists.status();
  if (*exists) return absl::AlreadyExistsError("this step is already committed");
  // Compact (as node daemons send it) and digested as its job's layout and
  // the plan cache compare it; before the lock: plans are big.
  v1::NodeSavePlan plan = node;
  if (absl::Status s = CompactSavePlan(plan, options_.limits); !s.ok()) {
    return WithContext(s, absl::StrCat("host ", host));
  }
  const std::string key = planning::HostPlanKey(plan);

  absl::MutexLock lock(&mu_);
  if (lost_hosts_.count(host) > 0) {
    return absl::UnavailableError(
        absl::StrCat("host ", host,
                     " was lost to the coordinator; it takes part in no save until it registers "
                     "again"));
  }
  SaveRef save;
  size_t active = 0;
  for (const auto& [id, other] : saves_) {
    if (other->ended()) continue;
    ++active;
    if (other->job == node.job() && other->step == node.step()) save = other;
  }
  if (save == nullptr) {
    if (active >= rendezvous_.max_active_saves) {
      return absl::ResourceExhaustedError(
          absl::StrCat(active, " saves are in flight at the coordinator; the limit is ",
                       rendezvous_.max_active_saves));
    }
    const absl::Time now = absl::Now();
    save = std::make_shared<ActiveSave>(node.world_size(), now, now + rendezvous_.plan_timeout);
    save->job = node.job();
    save->step = node.step();
    const std::string id = catalog_.NewPartialId();
    save->save_id = absl::StrCat(node.job(), "/", node.step(), "/", id);
    save->partial_dir = storage::PartialDir(root(), node.job(), node.step(), id);
    saves_[save->save_id] = save;
  } else if (save->phase != ActiveSave::Phase::kGathering) {
    return absl::FailedPreconditionError("this step is already being saved");
  }
  // From here a bad plan fails the save for every host: they would
  // otherwise wait for ranks that will never come.
  absl::Status bad;
  if (node.world_size() != save->world_size()) {
    bad = absl::InvalidArgumentError(
        absl::StrCat("host ", host, " says the world has ", node.world_size(), " ranks, host ",
                     save->nodes.empty() ? std::string("?") : save->nodes.front().host().host(),
                     " said ", save->world_size()));
  } else if (save->node_index.count(host) > 0) {
    bad = absl::FailedPreconditionError(
        absl::StrCat("host ", host, " sent its plan for this save twice"));
  }
  for (int i = 0; bad.ok() && i < node.ranks_size(); ++i) {
    const int rank = node.ranks(i).rank();
    const absl::StatusOr<bool> arrived = save->ranks.Arrive(rank);
    if (absl::IsInvalidArgument(arrived.status())) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("host ", host, " sent rank ", rank, " of a world of ", save->world_size()));
    } else if (absl::IsAlreadyExists(arrived.status())) {
      bad =
          absl::InvalidArgumentError(absl::StrCat("rank ", rank, " planned on both host ",
                                                  RankHost(*save, rank, host), " and host ", host));
    } else if (!arrived.ok()) {
      bad = WithContext(arrived.status(), absl::StrCat("host ", host));
    }
  }
  if (!bad.ok()) {
    FailLocked(*save, bad);
    return bad;
  }
  save->node_index[host] = save->nodes.size();
  save->nodes.push_back(std::move(plan));
  save->layout_keys[host] = key;
  *plan_it = save->ranks.complete();
  if (*plan_it) {
    save->phase = ActiveSave::Phase::kPlanning;
    save->planner_busy = true;
    return save;
  }
  auto known = layouts_.find(node.job());
  // Replicas are placed once every host's part is known: no early answers.
  if (!memory_cluster_ && known != layouts_.end() &&
      known->second.world_size == save->world_size()) {
    auto same = known->second.keys.find(host);
    if (same != known->second.keys.end() && same->second == key &&
        known->second.parts.count(host) > 0) {
      save->early[host] = known->second.parts.at(host);
      save->early_chunk_bytes = known->second.chunk_bytes;
      ++barrier_skips_;
      *early = true;
    }
  }
  return save;
}

std::string SaveGathering::RankHost(const ActiveSave& save, int rank, const std::string& host) {
  // Only on the error path: the barrier keeps ranks, not their hosts.
  for (const v1::NodeSavePlan& node : save.nodes) {
    for (const auto& r : node.ranks()) {
      if (r.rank() == rank) return node.host().host();
    }
  }
  return host;  // twice in this host's own plan
}

absl::StatusOr<v1::SaveAssignment> SaveGathering::AnswerEarly(const SaveRef& save,
                                                              const v1::HostIdentity& host) {
  const absl::Status created = CreatePartialDir(backend_, root(), save->job, save->partial_dir);
  std::shared_ptr<const v1::HostAssignment> part;
  v1::SaveAssignment mine;
  {
    absl::MutexLock lock(&mu_);
    if (!created.ok()) FailLocked(*save, created);
    auto found = save->early.find(host.host());
    if (save->phase != ActiveSave::Phase::kFailed && found != save->early.end()) {
      part = found->second;
      mine.set_save_id(save->save_id);
      mine.set_chunk_bytes(save->early_chunk_bytes);
      mine.set_partial_dir(save->partial_dir.substr(root().size() + 1));
    } else if (save->error.ok()) {
      FailLocked(*save, absl::AbortedError(absl::StrCat(save->Who(), " ended")));
    }
  }
  if (part == nullptr) {
    // Failed meanwhile: the directory may have been made after the failure
    // removed it.
    bool keep = false;
    {
      absl::MutexLock lock(&mu_);
      keep = save->keep_partial;
    }
    if (!keep) (void)backend_.RemoveAll(save->partial_dir);
    absl::MutexLock lock(&mu_);
    return save->error;
  }
  *mine.add_hosts() = *part;  // outside mu_: parts are big
  return mine;
}

void SaveGathering::ForgetLayoutLocked(const std::string& job) {
  auto old = layouts_.find(job);
  if (old == layouts_.end()) return;
  layout_bytes_ -= old->second.bytes;
  layouts_.erase(old);
}

void SaveGathering::RememberLayoutLocked(const ActiveSave& save) {
  ForgetLayoutLocked(save.job);
  if (save.nodes.size() < 2) return;  // one host has no barrier to skip
  KnownLayout layout;
  layout.world_size = save.world_size();
  layout.chunk_bytes = save.plan.assignment->chunk_bytes();
  layout.parts = save.parts;  // shared, not copied
  layout.keys = save.layout_keys;
  // The parts alias the plan's assignment: what they hold is all of it.
  layout.bytes = planning::AssignmentBytes(*save.plan.assignment);
  for (const auto& [host, key] : layout.keys) layout.bytes += key.size();
  // Known layouts share the plan cache's budget (and mostly its memory).
  const uint64_t most = rendezvous_.plan_cache_bytes;
  if (layout.bytes > most) return;
  while (layout_bytes_ + layout.bytes > most && !layouts_.empty()) {
    layout_bytes_ -= layouts_.begin()->second.bytes;
    layouts_.erase(layouts_.begin());
  }
  layout_bytes_ += layout.bytes;
  layouts_[save.job] = std::move(layout);
}

void SaveGathering::PlanGathered(const SaveRef& save) {
  // Hosts in name order: the same hosts give the same plan (and cache key)
  // whatever order their plans arrived in.
  std::sort(save->nodes.begin(), save->nodes.end(),
            [](const v1::NodeSavePlan& a, const v1::NodeSavePlan& b) {
              return a.host().host() < b.host().host();
            });
  // Their keys, digested as they arrived, in the same order: layout_keys
  // is a map by host name.
  std::vector<std::string> host_keys;
  host_keys.reserve(save->nodes.size());
  for (const auto& [host, key] : save->layout_keys) host_keys.push_back(key);
  absl::StatusOr<planning::SavePlan> plan = plan_cache_.Plan(save->nodes, host_keys, options_);
  const std::string& partial = save->partial_dir;  // set once, at the save's start
  absl::Status status = plan.status();
  if (status.ok()) status = CreatePartialDir(backend_, root(), save->job, partial);
  // Outside mu_ (parts are big): each host's part, shared by its answer and
  // the layout the next step may reuse, checked against the parts hosts
  // that went on early got from the last layout.
  Parts parts;
  std::vector<std::string> changed;
  if (status.ok()) {
    const std::shared_ptr<const v1::SaveAssignment>& assignment = plan->assignment;
    for (const v1::HostAssignment& h : assignment->hosts()) {
      parts[h.host().host()] = std::shared_ptr<const v1::HostAssignment>(assignment, &h);
    }
    Parts early;
    uint64_t early_chunk_bytes = 0;
    {
      absl::MutexLock lock(&mu_);
      early = save->early;  // pointers; fixed once gathering ended
      early_chunk_bytes = save->early_chunk_bytes;
    }
    for (const auto& [host, part] : early) {
      auto now = parts.find(host);
      if (now == parts.end() ||
          !google::protobuf::util::MessageDifferencer::Equals(*now->second, *part) ||
          plan->assignment->chunk_bytes() != early_chunk_bytes) {
        changed.push_back(host);
      }
    }
  }
  std::map<std::string, v1::ReplicaPlan> replicas;
  std::map<std::string, v1::ErasurePlan> erasure;
  uint64_t manifest_bytes = 0;
  if (status.ok() && memory_cluster_ && save->nodes.size() > 1) {
    std::map<std::string, std::string> addresses;
    for (const v1::NodeSavePlan& node : save->nodes) {
      addresses[node.host().host()] = node.host().address();
    }
    uint64_t replica_id = 0;
    FillRandom(&replica_id, sizeof replica_id);
    std::string secret(16, '\0');
    FillRandom(secret.data(), secret.size());
    if (erasure_k_ > 0) {
      absl::StatusOr<planning::ErasurePlacement> placed =
          planning::PlaceErasure(parts, addresses, erasure_k_, erasure_m_, replica_id, secret);
      status = placed.status();
      if (status.ok()) {
        erasure = std::move(placed->hosts);
        status = WriteErasureLayout(backend_, partial, placed->whole);
      }
    } else {
      absl::StatusOr<std::map<std::string, v1::ReplicaPlan>> placed =
          planning::PlaceReplicas(parts, addresses, replicas_, replica_id, secret);
      status = placed.status();
      if (placed.ok()) replicas = std::move(*placed);
    }
    manifest_bytes = plan->ManifestBytes();  // not made whole: a cluster's is gigabytes
  }
  absl::ReleasableMutexLock lock(&mu_);
  save->planner_busy = false;
  if (save->phase != ActiveSave::Phase::kPlanning) {
    // Failed meanwhile (a host was lost): nothing may stay behind.
    std::vector<v1::NodeSavePlan>().swap(save->nodes);
    lock.Release();
    (void)backend_.RemoveAll(partial);
    return;
  }
  if (status.ok() && !changed.empty()) {
    ForgetLayoutLocked(save->job);
    status = absl::FailedPreconditionError(absl::StrCat(
        "the job's layout changed since its last save (other shards, ranks or hosts), but hosts ",
        absl::StrJoin(changed, ", "),
        " had already started from the last one's plan; save this step again: it is planned "
        "afresh"));
  }
  if (!status.ok()) {
    FailLocked(*save, status);
    lock.Release();
    (void)backend_.RemoveAll(partial);
    return;
  }
  save->node_index.clear();
  for (size_t i = 0; i < save->nodes.size(); ++i)
    save->node_index[save->nodes[i].host().host()] = i;
  save->plan = std::move(*plan);
  save->created_unix_ms = absl::ToUnixMillis(absl::Now());
  save->parts = std::move(parts);
  save->replicas = std::move(replicas);
  save->erasure = std::move(erasure);
  save->manifest_bytes = manifest_bytes;
  save->phase = ActiveSave::Phase::kWriting;
  save->deadline = absl::Now() + rendezvous_.write_timeout;
  RememberLayoutLocked(*save);
  // Fault tests kill the coordinator here: hosts hold a plan, the partial
  // directory exists, nothing is committed.
  if (save->nodes.size() > 1) FaultPoint("coordinator.planned");
}

absl::Status SaveGathering::GatheringTimeout(const ActiveSave& save) const {
  return RanksNeverCame(save.ranks, rendezvous_.plan_timeout);
}

absl::Status SaveGathering::WaitGathered(ActiveSave& save, const std::string& host,
                                         const CallerGone& gone) {
  auto gathered = [&save]() { return save.phase != ActiveSave::Phase::kGathering; };
  for (;;) {
    bool timed_out = false;
    const bool present = AwaitUnlessGone(
        mu_,
        [&] {
          timed_out = save.ranks.Expired(absl::Now());
          return gathered() || timed_out;
        },
        gone);
    if (!present) {
      // Its plan is in the save, but it will write nothing: the others
      // would wait for it to the deadline.
      FailLocked(save, absl::AbortedError(absl::StrCat(
                           "host ", host, " gave up waiting for the other hosts' plans")));
      return absl::CancelledError("the host gave up waiting for the others");
    }
    if (gathered()) return absl::OkStatus();
    if (!timed_out) continue;
    FailLocked(save, GatheringTimeout(save));
    return absl::OkStatus();
  }
}

std::optional<absl::Status> SaveGathering::LostCarrierLocked(const ActiveSave& save,
                                                             absl::Time now) const {
  if (save.phase != ActiveSave::Phase::kGathering ||
      now - save.started < rendezvous_.lost_ranks_grace) {
    return std::nullopt;
  }
  std::vector<int> arrived;
  for (const v1::NodeSavePlan& node : save.nodes) {
    for (const auto& r : node.ranks()) arrived.push_back(r.rank());
  }
  std::optional<HostRanks::LostCarrier> lost =
      host_ranks_.LostFrom(save.job, save.world_size(), arrived);
  if (!lost.has_value()) return std::nullopt;
  return HostRanks::LostError(lost->host, lost->ranks, save.world_size(), lost->reason);
}

void SaveGathering::ExpireSaves(absl::Time now) {
  std::vector<std::string> partials;
  {
    absl::MutexLock lock(&mu_);
    std::vector<SaveRef> due;
    std::vector<std::pair<SaveRef, absl::Status>> lost;
    for (const auto& [id, save] : saves_) {
      // Waiting for ranks a lost host carried: they will not come.
      if (std::optional<absl::Status> why = LostCarrierLocked(*save, now)) {
        lost.emplace_back(save, *why);
        continue;
      }
      if (now < save->deadline) continue;
      if (save->phase == ActiveSave::Phase::kGathering ||
          save->phase == ActiveSave::Phase::kWriting) {
        due.push_back(save);
      }
    }
    for (const SaveRef& save : due) {
      absl::Status why;
      if (save->phase == ActiveSave::Phase::kGathering) {
        why = GatheringTimeout(*save);
      } else {
        std::vector<std::string> silent;
        for (const auto& [host, index] : save->node_index) {
          if (save->reports.count(host) == 0) silent.push_back(host);
        }
        why = absl::DeadlineExceededError(absl::StrCat(
            "hosts [", absl::StrJoin(silent, ", "), "] did not report their files within ",
            absl::FormatDuration(rendezvous_.write_timeout), " of the plan"));
      }
      if (FailLocked(*save, why)) partials.push_back(save->partial_dir);
    }
    for (const auto& [save, why] : lost) {
      if (FailLocked(*save, why)) partials.push_back(save->partial_dir);
    }
  }
  for (const std::string& partial : partials) (void)backend_.RemoveAll(partial);
}

absl::StatusOr<v1::SaveAssignment> SaveGathering::PlanSave(const v1::NodeSavePlan& node,
                                                           const CallerGone& gone) {
  bool plan_it = false;
  bool early = false;
  absl::StatusOr<SaveRef> joined = JoinSave(node, &plan_it, &early);
  if (!joined.ok()) return joined.status();
  const SaveRef save = *joined;
  if (early) return AnswerEarly(save, node.host());
  if (plan_it) PlanGathered(save);
  const std::string& host = node.host().host();
  v1::SaveAssignment mine;
  std::shared_ptr<const v1::HostAssignment> part;
  std::string remove;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    if (!plan_it) {
      if (absl::Status s = WaitGathered(*save, host, gone); !s.ok()) return s;
      AwaitUnlessGone(mu_, [&] { return save->phase != ActiveSave::Phase::kPlanning; }, {});
    }
    if (save->phase == ActiveSave::Phase::kFailed) {
      // Hosts that went on early may have made the directory before the
      // gathering failed (timed out): nothing may stay behind.
      error = save->error;
      if (!save->keep_partial) remove = save->partial_dir;
    } else if (save->phase != ActiveSave::Phase::kWriting) {
      error = absl::FailedPreconditionError(absl::StrCat(save->Who(), " has already moved on"));
    } else {
      mine.set_save_id(save->save_id);
      mine.set_chunk_bytes(save->plan.assignment->chunk_bytes());
      mine.set_partial_dir(save->partial_dir.substr(root().size() + 1));
      auto found = save->parts.find(host);
      if (found != save->parts.end()) part = found->second;
      if (auto r = save->replicas.find(host); r != save->replicas.end()) {
        *mine.mutable_replicas() = r->second;
      }
      if (auto e = save->erasure.find(host); e != save->erasure.end()) {
        *mine.mutable_erasure() = e->second;
      }
      mine.set_manifest_bytes(save->manifest_bytes);
      if (save->nodes.size() == 1) {
        *mine.mutable_manifest_template() = save->plan.Manifest();
        mine.mutable_manifest_template()->set_created_unix_ms(save->created_unix_ms);
      }
    }
  }
  if (!remove.empty()) (void)backend_.RemoveAll(remove);
  if (!error.ok()) return error;
  v1::HostAssignment* mine_part = mine.add_hosts();
  if (part != nullptr) {
    *mine_part = *part;  // outside mu_: parts are big
  } else {
    *mine_part->mutable_host() = node.host();
  }
  return mine;
}

absl::StatusOr<SaveGathering::Reported> SaveGathering::Report(const v1::NodePersistReport& report) {
  const std::string& host = report.host().host();
  SaveRef save;
  bool commit_it = false;
  {
    absl::MutexLock lock(&mu_);
    save = FindLocked(report.save_id());
    if (save == nullptr || save->phase == ActiveSave::Phase::kCommitted) {
      return absl::NotFoundError(
          absl::StrCat("save ", QuoteId(report.save_id()), " is not active"));
    }
    if (save->phase == ActiveSave::Phase::kFailed) {
      return absl::NotFoundError(
          absl::StrCat("save ", QuoteId(report.save_id()),
                       " is not active: it failed: ", save->error.message()));
    }
    // A host that went on early may report before the others planned.
    const bool early = save->early.count(host) > 0;
    if (save->phase != ActiveSave::Phase::kWriting &&
        !(early && (save->phase == ActiveSave::Phase::kGathering ||
                    save->phase == ActiveSave::Phase::kPlanning))) {
      return absl::FailedPreconditionError(
          absl::StrCat("save ", QuoteId(report.save_id()), " is not taking reports now"));
    }
    if (save->node_index.count(host) == 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("host ", host, " takes no part in save ", QuoteId(report.save_id())));
    }
    // Only its own files: a host's checksums fill only its chunks.
    const Parts& parts = save->phase == ActiveSave::Phase::kWriting ? save->parts : save->early;
    auto part = parts.find(host);
    if (part == parts.end()) {
      return absl::PermissionDeniedError(
          absl::StrCat("host ", host, " has no part in save ", QuoteId(report.save_id())));
    }
    const auto& own = part->second->files();
    auto is_own = [&](const std::string& file) {
      return std::find(own.begin(), own.end(), file) != own.end();
    };
    for (const std::string& file : report.files()) {
      if (!is_own(file)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host ", host, " reported file ", file.substr(0, 256), ", which is not one of its ",
            own.size(), " files of save ", QuoteId(report.save_id())));
      }
    }
    for (const v1::ChunkChecksum& c : report.checksums()) {
      if (!is_own(c.file())) {
        return absl::InvalidArgumentError(
            absl::StrCat("host ", host, " reported a checksum for file ", c.file().substr(0, 256),
                         ", which is not one of its files of save ", QuoteId(report.save_id())));
      }
    }
    if (!save->reports.emplace(host, report).second) {
      return absl::FailedPreconditionError(
          absl::StrCat("host ", host, " reported save ", QuoteId(report.save_id()), " twice"));
    }
    commit_it =
        save->phase == ActiveSave::Phase::kWriting && save->reports.size() == save->nodes.size();
    if (commit_it) save->phase = ActiveSave::Phase::kCommitting;
  }
  Reported reported;
  reported.save = save;
  if (commit_it) {
    // Committing: the plan and the reports are fixed, read without mu_.
    reported.last = true;
    reported.job = save->job;
    reported.partial_dir = save->partial_dir;
    reported.plan = save->plan;
    reported.created_unix_ms = save->created_unix_ms;
    reported.reports = &save->reports;
  }
  return reported;
}

absl::StatusOr<v1::CommitResult> SaveGathering::Committed(const Reported& reported,
                                                          const absl::Status& status,
                                                          std::string manifest) {
  ActiveSave& save = *reported.save;
  std::string partial;
  {
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      save.phase = ActiveSave::Phase::kCommitted;
      save.result.set_step(save.step);
      save.result.set_path(storage::StepDir(root(), save.job, save.step));
      save.result.set_manifest(std::move(manifest));
    } else {
      save.phase = ActiveSave::Phase::kFailed;
      save.error = status;
      save.keep_partial = CommitOutcomeUnknown(status);
      partial = save.partial_dir;
    }
    EndLocked(save);
  }
  if (!status.ok()) {
    // Best effort: restart removes the rest.
    if (!CommitOutcomeUnknown(status)) (void)backend_.RemoveAll(partial);
    return status;
  }
  return save.result;  // fixed once committed
}

absl::StatusOr<v1::CommitResult> SaveGathering::AwaitCommit(const SaveRef& save,
                                                            const std::string& host,
                                                            const CallerGone& gone) {
  absl::MutexLock lock(&mu_);
  auto vetoed = [&save]() -> absl::Status {
    absl::MutexLock veto(&save->commit_point_mu);
    return save->veto;
  };
  if (!AwaitUnlessGone(
          mu_, [&] { return save->ended() || !vetoed().ok(); }, gone)) {
    // The host gave up: it counts its save failed and may remove its files,
    // so the save must not commit without them.
    FailLocked(*save,
               absl::AbortedError(absl::StrCat(
                   "host ", host, " gave up waiting for the commit (its call was cancelled)")));
    return absl::CancelledError("the host gave up waiting for the commit");
  }
  if (save->phase == ActiveSave::Phase::kFailed) return save->error;
  if (absl::Status veto = vetoed(); !veto.ok() && !save->ended()) return veto;
  return save->result;
}

absl::Status SaveGathering::PassCommitPoint(const SaveRef& save) {
  absl::MutexLock veto(&save->commit_point_mu);
  if (!save->veto.ok()) return save->veto;
  save->commit_point_passed = true;
  return absl::OkStatus();
}

bool SaveGathering::AbortSave(const v1::AbortSaveRequest& request) {
  std::string partial;
  bool failed = false;
  {
    absl::MutexLock lock(&mu_);
    SaveRef save = FindLocked(request.save_id());
    if (save == nullptr && request.save_id().empty()) {
      for (const auto& [id, other] : saves_) {
        if (!other->ended() && other->job == request.job() && other->step == request.step()) {
          save = other;
        }
      }
    }
    if (save == nullptr) return false;
    const std::string by =
        request.host().host().empty() ? "" : absl::StrCat("host ", request.host().host(), ": ");
    failed = FailLocked(*save, absl::AbortedError(absl::StrCat(by, request.reason())));
    if (save->phase == ActiveSave::Phase::kFailed && !save->keep_partial) {
      partial = save->partial_dir;
    }
  }
  // Best effort: restart removes whatever is left.
  if (!partial.empty()) (void)backend_.RemoveAll(partial);
  return failed;
}

void SaveGathering::AbortAll(const absl::Status& error) {
  std::vector<std::string> partials;
  {
    absl::MutexLock lock(&mu_);
    std::vector<SaveRef> live;  // FailLocked may erase from saves_
    for (const auto& [id, save] : saves_) {
      if (!save->ended()) live.push_back(save);
    }
    for (const SaveRef& save : live) {
      if (FailLocked(*save, error) && !save->keep_partial) partials.push_back(save->partial_dir);
    }
    layouts_.clear();
    layout_bytes_ = 0;
  }
  // Best effort: restart and gc remove whatever is left.
  for (const std::string& partial : partials) {
    if (!partial.empty()) (void)backend_.RemoveAll(partial);
  }
}

void SaveGathering::HostLost(const std::string& host, const std::string& reason) {
  std::vector<std::string> partials;
  {
    absl::MutexLock lock(&mu_);
    lost_hosts_.insert(host);
    // The saves it takes part in: those it sent its plan to, and those of
    // the jobs it carried ranks of, whose plans may not have come yet.
    std::vector<std::pair<SaveRef, std::vector<int>>> hit;  // FailLocked may erase from saves_
    for (const auto& [id, save] : saves_) {
      if (save->ended()) continue;
      std::vector<int> ranks = host_ranks_.RanksOf(host, save->job, save->world_size());
      auto member = save->node_index.find(host);
      if (member != save->node_index.end() && member->second < save->nodes.size()) {
        ranks.clear();
        for (const auto& r : save->nodes[member->second].ranks()) ranks.push_back(r.rank());
      }
      if (member != save->node_index.end() || !ranks.empty()) {
        hit.emplace_back(save, std::move(ranks));
      }
    }
    for (const auto& [save, ranks] : hit) {
      const absl::Status why = HostRanks::LostError(host, ranks, save->world_size(), reason);
      if (save->phase == ActiveSave::Phase::kCommitting) {
        // The committer holds the save: it fails at its commit point, and
        // the hosts waiting for it learn now (AwaitCommit).
        absl::MutexLock veto(&save->commit_point_mu);
        if (!save->commit_point_passed && save->veto.ok()) save->veto = why;
        continue;
      }
      if (FailLocked(*save, why)) partials.push_back(save->partial_dir);
    }
  }
  for (const std::string& partial : partials) {
    if (!partial.empty()) (void)backend_.RemoveAll(partial);
  }
}

void SaveGathering::HostRegistered(const std::string& host) {
  absl::MutexLock lock(&mu_);
  lost_hosts_.erase(host);
}

std::vector<std::pair<std::string, std::string>> SaveGathering::FailedSaves(
    absl::Span<const std::string> save_ids) {
  std::vector<std::pair<std::string, std::string>> failed;
  absl::MutexLock lock(&mu_);
  for (const std::string& id : save_ids) {
    SaveRef save = FindLocked(id);
    if (save == nullptr) {
      failed.emplace_back(id, "the coordinator does not know this save (it restarted)");
    } else if (save->phase == ActiveSave::Phase::kFailed) {
      failed.emplace_back(id, std::string(save->error.message()));
    }
  }
  return failed;
}

bool SaveGathering::SaveInFlight(const std::string& job, int64_t step) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, save] : saves_) {
    if (!save->ended() && save->job == job && save->step == step) return true;
  }
  return false;
}

bool SaveGathering::KnowsSave(const std::string& save_id) const {
  absl::MutexLock lock(&mu_);
  return saves_.count(save_id) > 0;
}

}  // namespace ckpt::coordinator
