#include "daemon/coordinator/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/commit.h"
#include "daemon/fault/fault_points.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/replica_placement.h"
#include "daemon/storage/layout.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/lib/compact_plan.h"
#include "proto/lib/secure_random.h"
#include "proto/lib/status_context.h"

namespace ckpt::coordinator {

// A save between the first host's plan and its end. Fields other than the
// gathered plans are guarded by the coordinator's mu_; the plans are
// written only while gathering and read by the one planner after.
struct Coordinator::ActiveSave {
  enum class Phase { kGathering, kPlanning, kWriting, kCommitting, kCommitted, kFailed };
  std::string save_id;
  std::string job;
  int64_t step = 0;
  int world_size = 0;
  Phase phase = Phase::kGathering;
  absl::Time deadline;                                   // for gathering, then for writing
  std::vector<v1::NodeSavePlan> nodes;                   // read by the planner without mu_
  bool planner_busy = false;                             // so they stay until it is done
  std::map<std::string, size_t> node_index;              // by host name
  std::map<int, std::string> rank_hosts;                 // ranks arrived, and from where
  planning::SavePlan plan;                               // all hosts'
  int64_t created_unix_ms = 0;                           // when it was planned
  std::string partial_dir;                               // absolute
  std::map<std::string, v1::NodePersistReport> reports;  // by host name
  // Hosts answered at once from the job's known layout, with the part they
  // got: the plan made once all arrive must give them the same.
  Parts early;
  uint64_t early_chunk_bytes = 0;
  Parts parts;                                     // by host, once planned
  std::map<std::string, std::string> layout_keys;  // by host (planning::HostPlanKey)
  absl::Status error;
  v1::CommitResult result;
  // A memory-tier save spread over hosts (ServeClusterMemoryTier): each
  // host's copies, and the manifest's planned size.
  std::map<std::string, v1::ReplicaPlan> replicas;
  std::map<std::string, v1::ErasurePlan> erasure;
  uint64_t manifest_bytes = 0;
  bool ended() const { return phase == Phase::kCommitted || phase == Phase::kFailed; }
  std::string Who() const { return absl::StrCat("save of job ", job, " step ", step); }
};

Coordinator::Coordinator(storage::Backend& backend, std::string root,
                         planning::SavePlannerOptions options, CatalogOptions catalog,
                         RendezvousOptions rendezvous)
    : backend_(backend),
      catalog_(backend, std::move(root), std::move(catalog)),
      options_(options),
      rendezvous_([&] {
        RendezvousOptions r = rendezvous;
        // EndLocked erases the oldest ended save: never the one ending.
        r.ended_saves_kept = std::max<size_t>(r.ended_saves_kept, 1);
        return r;
      }()),
      plan_cache_(rendezvous.plan_cache_bytes),
      gc_(backend, catalog_) {}

void Coordinator::EnableRetention(planning::RetentionConfig config) {
  retention_config_ = config;
  retention_ = std::make_unique<RetentionRunner>(gc_, std::move(config));
}

Coordinator::SaveRef Coordinator::FindLocked(const std::string& save_id) {
  auto it = saves_.find(save_id);
  return it == saves_.end() ? nullptr : it->second;
}

bool Coordinator::FailLocked(ActiveSave& save, const absl::Status& error) {
  if (save.ended() || save.phase == ActiveSave::Phase::kCommitting) return false;
  save.error = error;
  save.phase = ActiveSave::Phase::kFailed;
  EndLocked(save);
  return true;
}

void Coordinator::EndLocked(ActiveSave& save) {
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

bool Coordinator::AwaitSave(const std::function<bool()>& done, const CallerGone& gone) {
  // Wakes now and then to notice a caller that went away (its RPC was
  // cancelled): a dead host must not hold a handler thread until the end.
  while (!mu_.AwaitWithTimeout(absl::Condition(&done), absl::Milliseconds(200))) {
    if (gone && gone()) return false;
  }
  return true;
}

uint64_t Coordinator::barrier_skips() const {
  absl::MutexLock lock(&mu_);
  return barrier_skips_;
}

size_t Coordinator::saves_in_flight() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, save] : saves_) n += save->ended() ? 0 : 1;
  return n;
}

absl::StatusOr<Coordinator::SaveRef> Coordinator::JoinSave(const v1::NodeSavePlan& node,
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
    save = std::make_shared<ActiveSave>();
    save->job = node.job();
    save->step = node.step();
    save->world_size = node.world_size();
    const std::string id = catalog_.NewPartialId();
    save->save_id = absl::StrCat(node.job(), "/", node.step(), "/", id);
    save->partial_dir = storage::PartialDir(root(), node.job(), node.step(), id);
    save->deadline = absl::Now() + rendezvous_.plan_timeout;
    saves_[save->save_id] = save;
  } else if (save->phase != ActiveSave::Phase::kGathering) {
    return absl::FailedPreconditionError("this step is already being saved");
  }
  // From here a bad plan fails the save for every host: they would
  // otherwise wait for ranks that will never come.
  absl::Status bad;
  if (node.world_size() != save->world_size) {
    bad = absl::InvalidArgumentError(
        absl::StrCat("host ", host, " says the world has ", node.world_size(), " ranks, host ",
                     save->nodes.empty() ? std::string("?") : save->nodes.front().host().host(),
                     " said ", save->world_size));
  } else if (save->node_index.count(host) > 0) {
    bad = absl::FailedPreconditionError(
        absl::StrCat("host ", host, " sent its plan for this save twice"));
  }
  for (int i = 0; bad.ok() && i < node.ranks_size(); ++i) {
    const int rank = node.ranks(i).rank();
    if (rank < 0 || rank >= save->world_size) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("host ", host, " sent rank ", rank, " of a world of ", save->world_size));
    } else if (auto it = save->rank_hosts.find(rank); it != save->rank_hosts.end()) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " planned on both host ", it->second, " and host ", host));
    } else {
      save->rank_hosts.emplace(rank, host);
    }
  }
  if (!bad.ok()) {
    FailLocked(*save, bad);
    return bad;
  }
  save->node_index[host] = save->nodes.size();
  save->nodes.push_back(std::move(plan));
  save->layout_keys[host] = key;
  *plan_it = save->rank_hosts.size() == static_cast<size_t>(save->world_size);
  if (*plan_it) {
    save->phase = ActiveSave::Phase::kPlanning;
    save->planner_busy = true;
    return save;
  }
  auto known = layouts_.find(node.job());
  // Replicas are placed once every host's part is known: no early answers.
  if (!memory_cluster_ && known != layouts_.end() && known->second.world_size == save->world_size) {
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

absl::Status Coordinator::CreatePartialDir(const std::string& job, const std::string& partial) {
  // A new job directory must survive a crash with the steps committed in
  // it: its entry in the root is made durable before anything is renamed
  // into it.
  absl::StatusOr<bool> job_exists = backend_.Exists(storage::JobDir(root(), job));
  if (!job_exists.ok()) return job_exists.status();
  if (absl::Status s = backend_.CreateDirs(absl::StrCat(partial, "/data")); !s.ok()) return s;
  if (!*job_exists) return backend_.SyncDir(root());
  return absl::OkStatus();
}

absl::Status Coordinator::WriteErasureLayout(const std::string& partial,
                                             const v1::ErasurePlan& whole) {
  const std::string bytes = whole.SerializeAsString();
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> file =
      backend_.NewWritableFile(absl::StrCat(partial, "/", kErasureFile));
  if (!file.ok()) return file.status();
  absl::Status status = (*file)->WriteAt(0, bytes.data(), bytes.size());
  if (status.ok()) status = (*file)->Sync();
  absl::Status closed = (*file)->Close();
  return status.ok() ? closed : status;
}

absl::StatusOr<v1::SaveAssignment> Coordinator::AnswerEarly(const SaveRef& save,
                                                            const v1::HostIdentity& host) {
  const absl::Status created = CreatePartialDir(save->job, save->partial_dir);
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
    (void)backend_.RemoveAll(save->partial_dir);
    absl::MutexLock lock(&mu_);
    return save->error;
  }
  *mine.add_hosts() = *part;  // outside mu_: parts are big
  return mine;
}

void Coordinator::ForgetLayoutLocked(const std::string& job) {
  auto old = layouts_.find(job);
  if (old == layouts_.end()) return;
  layout_bytes_ -= old->second.bytes;
  layouts_.erase(old);
}

void Coordinator::RememberLayoutLocked(const ActiveSave& save) {
  ForgetLayoutLocked(save.job);
  if (save.nodes.size() < 2) return;  // one host has no barrier to skip
  KnownLayout layout;
  layout.world_size = save.world_size;
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

void Coordinator::PlanGathered(const SaveRef& save) {
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
  if (status.ok()) status = CreatePartialDir(save->job, partial);
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
        status = WriteErasureLayout(partial, placed->whole);
      }
    } else {
      absl::StatusOr<std::map<std::string, v1::ReplicaPlan>> placed =
          planning::PlaceReplicas(parts, addresses, replicas_, replica_id, secret);
      status = placed.status();
      if (placed.ok()) replicas = std::move(*placed);
    }
    manifest_bytes = plan->Manifest().ByteSizeLong();
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

absl::Status Coordinator::GatheringTimeout(const ActiveSave& save) const {
  std::vector<int> missing;
  for (int r = 0; r < save.world_size && missing.size() < 16; ++r) {
    if (save.rank_hosts.count(r) == 0) missing.push_back(r);
  }
  const size_t absent = save.world_size - save.rank_hosts.size();
  return absl::DeadlineExceededError(absl::StrCat(
      "ranks [", absl::StrJoin(missing, ", "), absent > 16 ? ", ..." : "", "] (", absent, " of ",
      save.world_size, ") never reached the coordinator within ",
      absl::FormatDuration(rendezvous_.plan_timeout), ": their hosts did not send plans"));
}

absl::Status Coordinator::WaitGathered(ActiveSave& save, const std::string& host,
                                       const CallerGone& gone) {
  auto gathered = [&save]() { return save.phase != ActiveSave::Phase::kGathering; };
  for (;;) {
    bool timed_out = false;
    const bool present = AwaitSave(
        [&] {
          timed_out = absl::Now() >= save.deadline;
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

void Coordinator::ExpireSaves(absl::Time now) {
  std::vector<std::string> partials;
  {
    absl::MutexLock lock(&mu_);
    std::vector<SaveRef> due;
    for (const auto& [id, save] : saves_) {
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
  }
  for (const std::string& partial : partials) (void)backend_.RemoveAll(partial);
}

absl::StatusOr<v1::SaveAssignment> Coordinator::PlanSave(const v1::NodeSavePlan& node,
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
      AwaitSave([&] { return save->phase != ActiveSave::Phase::kPlanning; }, {});
    }
    if (save->phase == ActiveSave::Phase::kFailed) {
      // Hosts that went on early may have made the directory before the
      // gathering failed (timed out): nothing may stay behind.
      error = save->error;
      remove = save->partial_dir;
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

absl::StatusOr<v1::CommitResult> Coordinator::ReportPersisted(const v1::NodePersistReport& report,
                                                              const CallerGone& gone) {
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
  if (commit_it) {
    std::string manifest;
    absl::Status status = Commit(save, memory_cluster_ ? &manifest : nullptr);
    std::string partial;
    {
      absl::MutexLock lock(&mu_);
      if (status.ok()) {
        save->phase = ActiveSave::Phase::kCommitted;
        save->result.set_step(save->step);
        save->result.set_path(storage::StepDir(root(), save->job, save->step));
        save->result.set_manifest(std::move(manifest));
      } else {
        save->phase = ActiveSave::Phase::kFailed;
        save->error = status;
        partial = save->partial_dir;
      }
      EndLocked(*save);
    }
    if (!status.ok()) {
      (void)backend_.RemoveAll(partial);  // best effort: restart removes the rest
      return status;
    }
    if (retention_ != nullptr) retention_->Committed(save->job);
    return save->result;
  }
  absl::MutexLock lock(&mu_);
  if (!AwaitSave([&] { return save->ended(); }, gone)) {
    // The host gave up: it counts its save failed and may remove its files,
    // so the save must not commit without them.
    FailLocked(*save,
               absl::AbortedError(absl::StrCat(
                   "host ", host, " gave up waiting for the commit (its call was cancelled)")));
    return absl::CancelledError("the host gave up waiting for the commit");
  }
  if (save->phase == ActiveSave::Phase::kFailed) return save->error;
  return save->result;
}

absl::Status Coordinator::Commit(const SaveRef& save, std::string* manifest_out) {
  std::map<std::pair<std::string, uint64_t>, uint32_t> crcs;
  for (const auto& [host, report] : save->reports) {
    for (const v1::ChunkChecksum& c : report.checksums())
      crcs[{c.file(), c.file_offset()}] = c.crc32c();
  }
  v1::CheckpointManifest manifest = save->plan.Manifest();
  manifest.set_created_unix_ms(save->created_unix_ms);
  absl::Status status = planning::ForEachMutableChunk(
      manifest, [&](v1::StoredChunk& chunk, const std::string& owner) -> absl::Status {
        // 0-byte items are complete in the plan: nothing written, no report.
        if (!planning::SaveChunkNeedsChecksum(chunk)) return absl::OkStatus();
        auto it = crcs.find({chunk.file(), chunk.file_offset()});
        if (it == crcs.end()) {
          return absl::InternalError(absl::StrCat("no checksum reported for ", chunk.file(),
                                                  " at offset ", chunk.file_offset(), " (", owner,
                                                  ")"));
        }
        chunk.set_crc32c(it->second);
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  if (manifest_out != nullptr) *manifest_out = manifest.SerializeAsString();
  absl::MutexLock lock(&commit_mu_);
  return CommitCheckpoint(backend_, root(), save->partial_dir, manifest);
}

absl::StatusOr<std::string> Coordinator::CommitCopy(
    const v1::CheckpointManifest& manifest,
    const std::function<absl::Status(const std::string& partial_dir)>& copy) {
  const std::string& job = manifest.job();
  const int64_t step = manifest.step();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, save] : saves_) {
      if (!save->ended() && save->job == job && save->step == step) {
        return absl::FailedPreconditionError(
            absl::StrCat("step ", step, " of job ", job, " is being saved here"));
      }
    }
  }
  absl::StatusOr<bool> exists = catalog_.StepExists(job, step);
  if (!exists.ok()) return exists.status();
  if (*exists) {
    return absl::AlreadyExistsError(
        absl::StrCat("step ", step, " of job ", job, " is committed in ", root()));
  }
  const std::string partial = storage::PartialDir(root(), job, step, catalog_.NewPartialId());
  absl::Status status = CreatePartialDir(job, partial);
  if (status.ok()) status = copy(partial);
  if (status.ok()) {
    absl::MutexLock lock(&commit_mu_);
    // Copied in late: a newer step committed meanwhile stays latest.
    absl::StatusOr<int64_t> latest = catalog_.ResolveStep(job, -1);
    status = CommitCheckpoint(backend_, root(), partial, manifest,
                              /*make_latest=*/!latest.ok() || *latest < step);
  }
  if (!status.ok()) {
    (void)backend_.RemoveAll(partial);  // best effort: restart removes the rest
    return status;
  }
  if (retention_ != nullptr) retention_->Committed(job);
  return storage::StepDir(root(), job, step);
}

bool Coordinator::AbortSave(const v1::AbortSaveRequest& request) {
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
    if (save->phase == ActiveSave::Phase::kFailed) partial = save->partial_dir;
  }
  // Best effort: restart removes whatever is left.
  if (!partial.empty()) (void)backend_.RemoveAll(partial);
  return failed;
}

void Coordinator::AbortSave(const std::string& save_id, const std::string& reason) {
  v1::AbortSaveRequest request;
  request.set_save_id(save_id);
  request.set_reason(reason);
  AbortSave(request);
}

void Coordinator::HostLost(const std::string& host, const std::string& reason) {
  std::vector<std::string> partials;
  {
    absl::MutexLock lock(&mu_);
    lost_hosts_.insert(host);
    std::vector<SaveRef> hit;  // FailLocked may erase ended saves from saves_
    for (const auto& [id, save] : saves_) {
      if (!save->ended() && save->node_index.count(host) > 0) hit.push_back(save);
    }
    for (const SaveRef& save : hit) {
      if (FailLocked(*save, absl::UnavailableError(absl::StrCat("host ", host, " ", reason)))) {
        partials.push_back(save->partial_dir);
      }
    }
    FailLoadsOfLocked(host, absl::UnavailableError(absl::StrCat("host ", host, " ", reason)));
  }
  for (const std::string& partial : partials) {
    if (!partial.empty()) (void)backend_.RemoveAll(partial);
  }
}

void Coordinator::HostRegistered(const std::string& host) {
  absl::MutexLock lock(&mu_);
  lost_hosts_.erase(host);
}

std::vector<std::pair<std::string, std::string>> Coordinator::FailedSaves(
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

bool Coordinator::SaveInFlight(const std::string& job, int64_t step) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, save] : saves_) {
    if (!save->ended() && save->job == job && save->step == step) return true;
  }
  return false;
}

bool Coordinator::KnowsSave(const std::string& save_id) const {
  absl::MutexLock lock(&mu_);
  return saves_.count(save_id) > 0;
}

absl::StatusOr<v1::LoadAssignment> Coordinator::PlanLoad(const v1::NodeLoadPlan& node,
                                                         std::unique_ptr<storage::FileLock>* pin) {
  // Pinned before the manifest is read. "latest" may move on between the
  // pin and the read (a commit): then the pin is taken again.
  constexpr int kPinAttempts = 3;
  absl::StatusOr<v1::CheckpointManifest> manifest;
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<storage::FileLock> held;
    int64_t pinned_step = -1;
    bool unpinnable = false;
    if (pin != nullptr) {
      absl::StatusOr<int64_t> step = catalog_.ResolveStep(node.job(), node.step());
      if (!step.ok()) return step.status();
      absl::StatusOr<std::unique_ptr<storage::FileLock>> pinned =
          PinStep(backend_, root(), node.job(), *step);
      if (pinned.ok()) {
        held = std::move(*pinned);
        pinned_step = *step;
      } else if (!absl::IsNotFound(pinned.status())) {
        // Locks do not work here (a filesystem without flock): gc cannot
        // lock the step either, so it keeps it; load unpinned.
        unpinnable = true;
        std::fprintf(stderr, "ckptd: load of job %s step %lld goes on unpinned: %s\n",
                     node.job().c_str(), static_cast<long long>(*step),
                     std::string(pinned.status().message()).c_str());
      }
      // NOT_FOUND: deleted meanwhile, or no MANIFEST; the read says which.
    }
    manifest = catalog_.ReadManifest(node.job(), node.step());
    if (!manifest.ok()) return manifest.status();
    if (pin == nullptr || unpinnable) break;
    if (held != nullptr && manifest->step() == pinned_step) {
      *pin = std::move(held);
      break;
    }
    if (attempt >= kPinAttempts) {
      return absl::AbortedError(absl::StrCat("the latest step of job ", node.job(), " changed ",
                                             kPinAttempts,
                                             " times while the load pinned it; try again"));
    }
  }
  absl::StatusOr<v1::LoadAssignment> assignment =
      planning::PlanLoad(*manifest, {node}, options_.limits);
  if (!assignment.ok()) return assignment.status();
  assignment->set_checkpoint_path(storage::StepDir(root(), node.job(), manifest->step()));
  return assignment;
}

}  // namespace ckpt::coordinator
