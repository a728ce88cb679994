#include "daemon/session/save_session.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <prometheus/counter.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/fault/fault_points.h"
#include "daemon/planning/node_save_plan.h"
#include "daemon/tier/erasure_transfer.h"
#include "daemon/tier/replica_transfer.h"
#include "proto/lib/align.h"
#include "proto/lib/dtype.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt::session {
namespace {

// Batches a rank may hold without submitting: enough to copy one while the
// next is being allocated, few enough that a rank cannot hoard the pool.
constexpr int kMaxOpenBatches = 4;

bool ToMemory(v1::SaveTier tier) { return tier != v1::SAVE_TIER_DURABLE; }

// Durable saves write to storage now; memory+durable ones later, when the
// memory tier persists them.
bool ToDisk(v1::SaveTier tier) { return tier != v1::SAVE_TIER_MEMORY; }

const char* TierName(v1::SaveTier tier) {
  switch (tier) {
    case v1::SAVE_TIER_MEMORY:
      return "memory";
    case v1::SAVE_TIER_MEMORY_AND_DURABLE:
      return "memory+durable";
    default:
      return "durable";
  }
}

}  // namespace

SaveSession::SaveSession(NodeContext& context, std::string job, int64_t step, int world_size,
                         int local_world_size, v1::SaveTier tier)
    : context_(context),
      job_(std::move(job)),
      step_(step),
      world_size_(world_size),
      local_world_size_(local_world_size),
      tier_(tier),
      store_(ToMemory(tier) ? context.memory_tier->coordinator() : context.coordinator),
      store_backend_(ToMemory(tier) ? context.memory_tier->backend() : context.backend),
      local_coordinator_(store_),
      coordinator_(local_world_size < world_size ? context.coordinator_client
                                                 : &local_coordinator_),
      planned_(world_size, local_world_size, absl::Now() + context.options.plan_timeout),
      absent_(job_, world_size, local_world_size),
      written_metric_(context.metrics.WrittenBytes(job_)) {
  absl::MutexLock lock(&mu_);
  times_.created = absl::Now();
  event_waited_.assign(world_size, false);
}

SaveSession::~SaveSession() = default;

std::string SaveSession::Who() const { return absl::StrCat("save of job ", job_, " step ", step_); }

planning::RankRequests SaveSession::RequestsLocked() const {
  planning::RankRequests requests;
  // Only called once every local rank has planned.
  for (const auto& [r, rank] : ranks_) requests[r] = &*rank.request;
  return requests;
}

std::string SaveSession::MissingLocked(const planning::RankBarrier& barrier) const {
  // A job spread over hosts: which of its ranks are this host's, only
  // their sessions say.
  const std::vector<int> here =
      spans_hosts() ? context_.sessions.RanksOf(job_) : std::vector<int>();
  const int count = barrier.expected() - barrier.arrived();
  return absl::StrCat(
      barrier.Missing(16, spans_hosts() ? &here : nullptr),
      spans_hosts() ? absl::StrCat(" (", count, " of this host's ", local_world_size_, ")") : "");
}

std::string SaveSession::save_id() const {
  absl::MutexLock lock(&mu_);
  return assignment_.save_id();
}

absl::Status SaveSession::CheckRankLocked(const RankSession& rank) const {
  if (absl::Status s = CheckMember(rank, job_, world_size_, absl::StrCat(Who(), ": ")); !s.ok()) {
    return s;
  }
  if (rank.local_world_size != local_world_size_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": rank ", rank.rank, " says ", rank.local_world_size,
                     " of the job's ranks are on this host; the save counts ", local_world_size_));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::PlanSaveResponse> SaveSession::Plan(const RankSession& rank,
                                                       const v1::PlanSaveRequest& request) {
  const std::string who = absl::StrCat(Who(), ": rank ", rank.rank);
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckRankLocked(rank); !s.ok()) return s;
    if (!error_.ok()) return error_;
    if (phase_ != Phase::kPlanning || ranks_.count(rank.rank) > 0) {
      return absl::FailedPreconditionError(absl::StrCat(who, ": already sent its plan"));
    }
    if (request.tier() != tier_) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, " asks for tier ", TierName(request.tier()),
                       "; the save's first rank asked for ", TierName(tier_)));
    }
    absl::StatusOr<codec::Codec> codec =
        codec::CodecNamed(request.codec().empty() ? context_.options.codec : request.codec());
    if (!codec.ok()) return WithContext(codec.status(), who);
    if (!codec_.has_value()) codec_ = *codec;
    if (*codec != *codec_) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, " asks for codec ", codec::CodecName(*codec),
                       "; the save's first rank asked for ", codec::CodecName(*codec_)));
    }
    if (request.delta_every() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": delta_every is ", request.delta_every(), "; 1 or more (0: the daemon's)"));
    }
    const int every =
        request.delta_every() > 0 ? request.delta_every() : context_.options.delta_every;
    if (!delta_every_.has_value()) delta_every_ = every;
    if (every != *delta_every_) {
      return absl::FailedPreconditionError(absl::StrCat(who, " asks for a full step every ", every,
                                                        "; the save's first rank asked for ",
                                                        *delta_every_));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    RankState& state = ranks_[rank.rank];
    if (phase_ != Phase::kPlanning || state.request.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(who, ": already sent its plan"));
    }
    absl::StatusOr<bool> completes = planned_.Arrive(rank.rank);
    if (!completes.ok()) return WithContext(completes.status(), who);
    state.request = request;
    last = *completes;
    if (last) ++busy_;
  }
  if (last) PlanAllRanks();

  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](SaveSession* s)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->phase_ != Phase::kPlanning; },
      this));
  if (!error_.ok()) return error_;
  auto it = ranks_.find(rank.rank);
  if (it == ranks_.end()) {
    // Only a hostile interleaving gets here: the save already ended.
    return absl::FailedPreconditionError(absl::StrCat(who, ": the save has already ended"));
  }
  const RankState& state = it->second;
  v1::PlanSaveResponse response;
  response.set_save_id(assignment_.save_id());
  response.set_chunk_bytes(assignment_.chunk_bytes());
  for (const v1::SaveItem& item : state.items) *response.add_items() = item;
  return response;
}

absl::StatusOr<std::unique_ptr<DiskReservations::Reservation>> SaveSession::ReserveDisk(
    const v1::HostAssignment& host) {
  const uint64_t quota = context_.options.job_max_disk_bytes;
  if (quota == 0 || !ToDisk(tier_)) return nullptr;
  coordinator::Catalog& catalog = context_.coordinator.catalog();
  return context_.disk_reservations.Reserve(
      job_, planning::HostAssignmentBytes(host), quota, [&]() -> absl::StatusOr<uint64_t> {
        absl::StatusOr<std::vector<v1::CheckpointSummary>> committed =
            catalog.ListCheckpoints(job_);
        if (!committed.ok()) return committed.status();
        uint64_t bytes = 0;
        for (const v1::CheckpointSummary& c : *committed) {
          bytes = c.bytes() > UINT64_MAX - bytes ? UINT64_MAX : bytes + c.bytes();
        }
        return bytes;
      });
}

void SaveSession::PlanAllRanks() {
  v1::NodeSavePlan plan;
  int delta_every = 0;
  {
    absl::MutexLock lock(&mu_);
    delta_every = delta_every_.value_or(0);
    plan = planning::BatchRankPlans(context_.host, job_, step_, world_size_,
                                    context_.writers.threads(), RequestsLocked());
  }
  plan.set_tier(tier_);
  // Other hosts send this host's replicas to its peer data channel.
  if (spans_hosts()) plan.mutable_host()->set_address(context_.peer_address);
  // One step number, one checkpoint: a step committed in the other tier is
  // not saved again in this one (the two would differ under one number, and
  // persisting this one would fail after the trainer was told it saved).
  absl::Status other = StoresOf(context_).AdmitSave(job_, step_, tier_);
  absl::StatusOr<v1::SaveAssignment> assignment =
      other.ok() ? coordinator_->PlanSave(plan) : absl::StatusOr<v1::SaveAssignment>(other);
  absl::Status status = assignment.status();
  if (status.ok() && assignment->hosts_size() != 1) {
    status = absl::InternalError(absl::StrCat("the coordinator's assignment is for ",
                                              assignment->hosts_size(), " hosts, not host ",
                                              context_.host.host(), " alone"));
  }
  // The job's disk quota, before any file exists: what it holds on disk
  // plus what its other saves in flight reserved, plus this save.
  std::unique_ptr<DiskReservations::Reservation> disk_reservation;
  if (status.ok()) {
    absl::StatusOr<std::unique_ptr<DiskReservations::Reservation>> reserved =
        ReserveDisk(assignment->hosts(0));
    if (reserved.ok()) {
      disk_reservation = std::move(*reserved);
    } else {
      status = reserved.status();
    }
  }
  // The memory tier makes room before a file exists: what it drops for this
  // save must be gone before the first byte is written.
  std::unique_ptr<tier::MemoryTier::Room> memory_room;
  std::shared_ptr<void> erasure_prefix;
  if (status.ok() && ToMemory(tier_)) {
    tier::MemoryTier& memory = *context_.memory_tier;
    const v1::ReplicaPlan& replicas = assignment->replicas();
    // Replicas are counted in the save's room: what it must hold is its
    // own files, the copies it keeps for others, and the manifest.
    const v1::ErasurePlan& erasure = assignment->erasure();
    const uint64_t copies = tier::ReplicaBytesToReceive(replicas, tier::MemoryTier::kBlockBytes);
    const uint64_t parity =
        tier::ParityBytesToHold(erasure, context_.host.host(), tier::MemoryTier::kBlockBytes);
    const uint64_t replica_bytes = copies + parity < copies ? ~uint64_t{0} : copies + parity;
    const uint64_t own = memory.SaveBytes(
        assignment->hosts(0), spans_hosts() ? assignment->manifest_bytes()
                                            : assignment->manifest_template().ByteSizeLong());
    if (replica_bytes > memory.budget_bytes() || own > memory.budget_bytes() - replica_bytes) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "host ", context_.host.host(), " must hold ", own, " bytes of its own and ",
          replica_bytes, " bytes of replicas of this save in its memory tier, more than its ",
          memory.budget_bytes(), " (--memory_tier_bytes)"));
    }
    if (status.ok()) status = tier::CheckReplicaPlan(replicas, copies);
    if (status.ok()) {
      status = tier::CheckStripes(erasure.k(), erasure.m(), erasure.piece_bytes(), erasure.secret(),
                                  erasure.stripes());
    }
    absl::StatusOr<std::unique_ptr<tier::MemoryTier::Room>> room =
        status.ok() ? memory.Reserve(job_, own + replica_bytes)
                    : absl::StatusOr<std::unique_ptr<tier::MemoryTier::Room>>(status);
    if (room.ok()) {
      memory_room = std::move(*room);
    } else {
      status = room.status();
    }
    // Spread over hosts, the coordinator made its directory in its own
    // memory: this host makes its own.
    if (status.ok() && spans_hosts()) {
      status = store_backend_.CreateDirs(
          absl::StrCat(store_.root(), "/", assignment->partial_dir(), "/data"));
    }
    // Senders of data shares may come before this host encodes: they wait.
    if (status.ok() && !erasure.stripes().empty() && context_.peer != nullptr) {
      erasure_prefix = context_.peer->OpenPrefix(erasure.id(), erasure.secret());
    }
  }
  std::vector<std::unique_ptr<storage::WritableFile>> files;
  if (status.ok()) {
    for (const std::string& name : assignment->hosts(0).files()) {
      absl::StatusOr<std::unique_ptr<storage::WritableFile>> file = store_backend_.NewWritableFile(
          absl::StrCat(store_.root(), "/", assignment->partial_dir(), "/", name));
      if (!file.ok()) {
        status = file.status();
        // Spread over hosts, the likely cause is the coordinator ending the
        // save (another host failed, a cancel) as this host began.
        if (spans_hosts() && absl::IsNotFound(status)) {
          status = absl::AbortedError(absl::StrCat(
              "host ", context_.host.host(),
              " found the save's directory gone as it began: the coordinator removes it when "
              "the save fails or is cancelled on any host (",
              status.message(), ")"));
        }
        break;
      }
      files.push_back(std::move(*file));
    }
  }
  // Step deltas on durable storage, for a save on one host (a job spread
  // over hosts, and the memory tier, store whole steps).
  std::shared_ptr<const DeltaBase> delta;
  if (status.ok() && tier_ == v1::SAVE_TIER_DURABLE && !spans_hosts()) {
    delta = ChooseDeltaBase(context_.coordinator.catalog(), context_.backend, job_, step_,
                            delta_every, assignment->manifest_template());
  }
  bool cleanup = false;
  {
    absl::MutexLock lock(&mu_);
    --busy_;
    delta_ = std::move(delta);
    // Kept even when opening the files failed: CleanUp aborts the save by
    // its id, which frees the step at the coordinator and removes the
    // partial directory it made.
    if (assignment.ok()) assignment_ = std::move(*assignment);
    memory_room_ = std::move(memory_room);
    disk_reservation_ = std::move(disk_reservation);
    erasure_prefix_ = std::move(erasure_prefix);
    if (status.ok()) {
      files_ = std::move(files);
      absl::StatusOr<std::map<int, planning::RankItems>> split =
          planning::SplitByRank(assignment_.hosts(0), RequestsLocked(), context_.pool.alignment());
      status = WithContext(split.status(), absl::StrCat("the coordinator's assignment for host ",
                                                        context_.host.host()));
      if (status.ok()) {
        for (auto& [r, items] : *split) {
          RankState& rank = ranks_[r];
          rank.items = std::move(items.items);
          rank.writes = std::move(items.writes);
          for (const v1::SaveItem& item : rank.items) bytes_total_ += item.bytes();
        }
      }
    }
    if (!status.ok()) FailLocked(WithContext(status, Who()));
    if (error_.ok()) {
      phase_ = Phase::kSnapshot;
      times_.planned = absl::Now();
      snapshots_.emplace(world_size_, local_world_size_,
                         absl::Now() + context_.options.snapshot_timeout);
    }
    cleanup = ReadyToCleanUpLocked();
  }
  if (cleanup) {
    for (auto& file : files) file->Abandon();
    CleanUp();
    return;
  }
  StartReceivingReplicas();
  FaultPoint("save.planned");
}

absl::StatusOr<v1::SaveBatch> SaveSession::NextBatch(const RankSession& rank) {
  const std::string who = absl::StrCat(Who(), ": rank ", rank.rank);
  uint64_t batch_id = 0;
  planning::BatchLayout layout;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckRankLocked(rank); !s.ok()) return s;
    if (!error_.ok()) return error_;
    if (phase_ != Phase::kSnapshot) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": asked for a batch in phase ", PhaseName(phase_)));
    }
    RankState& state = ranks_[rank.rank];
    if (state.handed_last) {
      return absl::FailedPreconditionError(absl::StrCat(who, ": all its batches were handed out"));
    }
    if (state.open_batches >= kMaxOpenBatches) {
      return absl::FailedPreconditionError(absl::StrCat(who, ": holds ", state.open_batches,
                                                        " batches not yet submitted; the limit is ",
                                                        kMaxOpenBatches));
    }
    layout = planning::NextBatchLayout(state.items, state.cursor, assignment_.chunk_bytes(),
                                       SaveBatchBytes(context_.options), context_.pool.alignment());
    batch_id = next_batch_++;
    Room& room = rooms_[batch_id];
    room.rank = rank.rank;
    room.slices = layout.slices;
    room.last = layout.last;
    state.handed_last = layout.last;
    ++state.open_batches;
    if (layout.room_bytes > 0) ++busy_;
  }
  absl::Status status;
  if (layout.room_bytes > 0) {
    // Backpressure: waits while the job's share of the pool is in flight.
    pool::Claim claim{job_, [this] { return abandoned_.load(std::memory_order_acquire); }};
    absl::StatusOr<pool::Allocation> allocation = context_.pool.Allocate(
        layout.room_bytes, absl::Now() + context_.options.pool_wait_timeout, claim);
    absl::MutexLock lock(&mu_);
    --busy_;
    if (allocation.ok()) {
      Room& room = rooms_[batch_id];
      room.allocation = *allocation;
      room.has_allocation = true;
    } else {
      status = WithContext(allocation.status(), absl::StrCat(who, ": room for a batch"));
      FailLocked(status);
    }
  }
  if (!status.ok()) {
    CleanUpIfDue();
    return status;
  }
  v1::SaveBatch batch;
  absl::Status error;
  bool cleanup = false;
  {
    absl::MutexLock lock(&mu_);
    error = error_;
    if (!error.ok()) {
      cleanup = ReadyToCleanUpLocked();
    } else {
      const Room& room = rooms_[batch_id];
      const RankState& state = ranks_[rank.rank];
      batch.set_batch_id(batch_id);
      batch.set_last(room.last);
      batch.set_segment_epoch(room.allocation.epoch);
      for (const planning::BatchSliceLayout& slice : room.slices) {
        const v1::SaveItem& item = state.items[slice.item];
        v1::BatchSlice* out = batch.add_slices();
        out->set_kind(item.kind());
        out->set_index(item.index());
        out->set_item_offset(slice.item_offset);
        out->set_length(slice.length);
        out->set_pool_offset(room.allocation.offset + slice.room_offset);
        out->set_pull(item.kind() == v1::SaveItem::SHARD &&
                      state.request->shards(static_cast<int>(item.index())).has_device_buffer());
      }
    }
  }
  if (cleanup) CleanUp();
  if (!error.ok()) return error;
  return batch;
}

std::map<int, std::vector<exec::WriteTask>> SaveSession::TasksFor(uint64_t batch_id, Room& room,
                                                                  bool pulled) {
  const RankState& state = ranks_[room.rank];
  const uint64_t alignment = context_.pool.alignment();
  const uint64_t chunk = std::max<uint64_t>(assignment_.chunk_bytes(), 1);
  std::shared_ptr<SaveSession> self = shared_from_this();
  std::map<int, std::vector<exec::WriteTask>> tasks;
  uint64_t count = 0;
  for (const planning::BatchSliceLayout& slice : room.slices) {
    const v1::SaveItem& item = state.items[slice.item];
    const bool pull = item.kind() == v1::SaveItem::SHARD &&
                      state.request->shards(static_cast<int>(item.index())).has_device_buffer();
    if (pull != pulled) continue;
    const v1::WriteItem& write = *state.writes[slice.item];
    char* data = context_.pool.base() + room.allocation.offset + slice.room_offset;
    // grouped-zstd's planes: one per byte of the tensor's elements.
    int element_bytes = 1;
    if (item.kind() == v1::SaveItem::SHARD) {
      absl::StatusOr<int64_t> size =
          DTypeSize(state.request->shards(static_cast<int>(item.index())).dtype());
      if (size.ok()) element_bytes = static_cast<int>(*size);
    }
    // The pad after the payload is written too (O_DIRECT wants whole
    // blocks); zero it so files never carry stale pool bytes.
    std::memset(data + slice.length, 0, AlignUp(slice.length, alignment) - slice.length);
    // An object is one stored chunk with one CRC, whatever its size.
    const uint64_t step = item.kind() == v1::SaveItem::OBJECT ? slice.length : chunk;
    for (uint64_t off = 0; off < slice.length; off += step) {
      const uint64_t payload = std::min(step, slice.length - off);
      const uint64_t file_offset = write.file_offset() + slice.item_offset + off;
      exec::WriteTask& task = tasks[write.writer()].emplace_back(exec::WriteTask{
          self, write.writer(), file_offset, data + off, AlignUp(payload, alignment), payload,
          batch_id, codec_.value_or(codec::Codec::kNone), element_bytes, alignment,
          /*delta_base=*/nullptr, /*delta_source=*/nullptr});
      SetDeltaBaseLocked(task);
      ++count;
    }
  }
  room.pending_chunks += count;
  pending_chunks_ += count;
  return tasks;
}

void SaveSession::SetDeltaBaseLocked(exec::WriteTask& task) const {
  if (task.file < 0 || task.file >= assignment_.hosts(0).files_size()) return;
  PointAtDeltaBase(delta_, assignment_.hosts(0).files(task.file), task);
}

absl::Status SaveSession::SubmitSnapshot(const RankSession& rank,
                                         const v1::SubmitSnapshotRequest& request) {
  const std::string who = absl::StrCat(Who(), ": rank ", rank.rank);
  std::map<int, std::vector<exec::WriteTask>> tasks;
  bool has_pulls = false;
  bool finish = false;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckRankLocked(rank); !s.ok()) return s;
    if (!error_.ok()) return error_;
    auto it = rooms_.find(request.batch_id());
    if (phase_ != Phase::kSnapshot || it == rooms_.end() || it->second.rank != rank.rank ||
        it->second.submitted) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": batch ", request.batch_id(), " is not an open batch of this rank"));
    }
    Room& room = it->second;
    tasks = TasksFor(request.batch_id(), room, /*pulled=*/false);
    const RankState& state = ranks_[rank.rank];
    for (const planning::BatchSliceLayout& slice : room.slices) {
      const v1::SaveItem& item = state.items[slice.item];
      has_pulls |= item.kind() == v1::SaveItem::SHARD &&
                   state.request->shards(static_cast<int>(item.index())).has_device_buffer();
    }
    if (has_pulls) {
      ++busy_;  // the device copies below write into the room
    } else {
      MarkSubmittedLocked(ranks_[rank.rank], request.batch_id());
      finish = ReadyToFinishLocked();
    }
  }
  for (auto& [writer, list] : tasks) context_.writers.Submit(writer, std::move(list));
  if (has_pulls) {
    absl::Status s = RunPulls(rank, request.batch_id());
    absl::Status error;
    bool cleanup = false;
    {
      absl::MutexLock lock(&mu_);
      --busy_;
      if (!s.ok()) {
        FailLocked(WithContext(s, who));
      } else if (error_.ok()) {
        MarkSubmittedLocked(ranks_[rank.rank], request.batch_id());
        finish = ReadyToFinishLocked();
      }
      error = error_;
      if (!error.ok()) cleanup = ReadyToCleanUpLocked();
    }
    if (cleanup) CleanUp();
    if (!error.ok()) return error;
  }
  if (finish) StartFinish();
  return absl::OkStatus();
}

void SaveSession::MarkSubmittedLocked(RankState& state, uint64_t batch_id) {
  Room& room = rooms_.at(batch_id);
  room.submitted = true;
  --state.open_batches;
  if (room.last && !snapshots_->Arrived(room.rank)) {
    absl::StatusOr<bool> completes = snapshots_->Arrive(room.rank);
    if (completes.ok() && *completes) times_.snapshotted = absl::Now();
  }
  FreeRoomIfDoneLocked(batch_id);
}

void SaveSession::FreeRoomIfDoneLocked(uint64_t batch_id) {
  auto it = rooms_.find(batch_id);
  if (it == rooms_.end() || !it->second.submitted || it->second.pending_chunks > 0) return;
  if (it->second.has_allocation) context_.pool.Free(it->second.allocation);
  rooms_.erase(it);
}

absl::Status SaveSession::WaitReadyEvent(int rank) {
  std::string handle;
  int device = 0;
  {
    absl::MutexLock lock(&mu_);
    if (event_waited_[rank]) return absl::OkStatus();
    handle = ranks_[rank].request->ready_event();
    device = ranks_[rank].request->ready_event_device();
  }
  if (!handle.empty()) {
    // The trainer's stream may still be writing the tensors: copy after it.
    if (absl::Status s = context_.gpu.WaitIpcEvent(handle, device); !s.ok()) {
      return WithContext(s, "waiting for the trainer's stream");
    }
  }
  absl::MutexLock lock(&mu_);
  event_waited_[rank] = true;
  return absl::OkStatus();
}

absl::Status SaveSession::RunPulls(const RankSession& rank, uint64_t batch_id) {
  if (!context_.gpu.HasDevice()) {
    return absl::FailedPreconditionError(absl::StrCat("pull over CUDA IPC: ckptd has ",
                                                      context_.gpu.Describe(),
                                                      "; use the push path or host tensors"));
  }
  if (absl::Status s = WaitReadyEvent(rank.rank); !s.ok()) return s;
  struct Pull {
    v1::DeviceBuffer source;
    std::string fqn;
    uint64_t item_offset = 0;
    uint64_t length = 0;
    char* destination = nullptr;
    int writer = 0;
    uint64_t file_offset = 0;
    int element_bytes = 1;
  };
  std::vector<Pull> pulls;
  uint64_t chunk = 0;
  codec::Codec codec = codec::Codec::kNone;
  std::shared_ptr<const DeltaBase> delta;
  std::vector<std::string> files;
  {
    absl::MutexLock lock(&mu_);
    chunk = std::max<uint64_t>(assignment_.chunk_bytes(), 1);
    codec = codec_.value_or(codec::Codec::kNone);
    delta = delta_;
    files.assign(assignment_.hosts(0).files().begin(), assignment_.hosts(0).files().end());
    const Room& room = rooms_[batch_id];
    const RankState& state = ranks_[rank.rank];
    for (const planning::BatchSliceLayout& slice : room.slices) {
      const v1::SaveItem& item = state.items[slice.item];
      if (item.kind() != v1::SaveItem::SHARD) continue;
      const v1::TensorShard& shard = state.request->shards(static_cast<int>(item.index()));
      if (!shard.has_device_buffer()) continue;
      pulls.push_back({shard.device_buffer(), shard.fqn(), slice.item_offset, slice.length,
                       context_.pool.base() + room.allocation.offset + slice.room_offset,
                       state.writes[slice.item]->writer(),
                       state.writes[slice.item]->file_offset() + slice.item_offset,
                       static_cast<int>(DTypeSize(shard.dtype()).value_or(1))});
    }
  }
  const uint64_t alignment = context_.pool.alignment();
  std::shared_ptr<SaveSession> self = shared_from_this();
  for (const Pull& pull : pulls) {
    absl::StatusOr<std::shared_ptr<gpu::IpcMapping>> mapping = context_.ipc.Get(
        rank.id, pull.source.ipc_handle(), pull.source.device(), pull.source.allocation_bytes());
    if (!mapping.ok()) return WithContext(mapping.status(), absl::StrCat("tensor ", pull.fqn));
    const uint64_t bytes = (*mapping)->bytes();
    if (pull.source.offset() > bytes || pull.item_offset > bytes - pull.source.offset() ||
        pull.length > bytes - pull.source.offset() - pull.item_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", pull.fqn, ": device buffer [", pull.source.offset(), ", +",
          pull.item_offset + pull.length, ") lies outside its allocation of ", bytes, " bytes"));
    }
    std::memset(pull.destination + pull.length, 0, AlignUp(pull.length, alignment) - pull.length);
    const char* source = static_cast<const char*>((*mapping)->device_ptr()) + pull.source.offset() +
                         pull.item_offset;
    absl::Status s = context_.gpu.CopyDeviceToHost(
        source, pull.destination, pull.length, chunk, [&](uint64_t offset, uint64_t length) {
          // Each landed chunk is written at once: copying overlaps writing.
          std::vector<exec::WriteTask> tasks;
          for (uint64_t off = offset; off < offset + length; off += chunk) {
            const uint64_t payload = std::min(chunk, offset + length - off);
            tasks.push_back(exec::WriteTask{self, pull.writer, pull.file_offset + off,
                                            pull.destination + off, AlignUp(payload, alignment),
                                            payload, batch_id, codec, pull.element_bytes, alignment,
                                            /*delta_base=*/nullptr, /*delta_source=*/nullptr});
            if (pull.writer >= 0 && static_cast<size_t>(pull.writer) < files.size()) {
              PointAtDeltaBase(delta, files[pull.writer], tasks.back());
            }
          }
          {
            absl::MutexLock lock(&mu_);
            rooms_[batch_id].pending_chunks += tasks.size();
            pending_chunks_ += tasks.size();
          }
          context_.writers.Submit(pull.writer, std::move(tasks));
        });
    if (!s.ok()) return WithContext(s, absl::StrCat("tensor ", pull.fqn));
  }
  return absl::OkStatus();
}

storage::WritableFile* SaveSession::File(int index) { return files_[index].get(); }

bool SaveSession::Abandoned() { return abandoned_.load(std::memory_order_acquire); }

void SaveSession::OnChunksWritten(absl::Span<const exec::WrittenChunk> chunks,
                                  absl::Status status) {
  bool finish = false;
  bool cleanup = false;
  {
    absl::MutexLock lock(&mu_);
    pending_chunks_ -= chunks.size();
    for (const exec::WrittenChunk& c : chunks) {
      auto room = rooms_.find(c.tag);
      if (room != rooms_.end()) {
        --room->second.pending_chunks;
        // Its room returns to the pool now: the next batch can use it.
        FreeRoomIfDoneLocked(c.tag);
      }
    }
    if (status.ok()) {
      uint64_t bytes = 0;
      uint64_t stored = 0;
      for (const exec::WrittenChunk& c : chunks) {
        v1::ChunkChecksum* sum = &checksums_.emplace_back();
        sum->set_file(assignment_.hosts(0).files(c.file));
        sum->set_file_offset(c.file_offset);
        sum->set_crc32c(c.crc32c);
        bytes += c.payload;
        if (c.codec == codec::Codec::kNone) {
          stored += c.payload;
          continue;
        }
        sum->set_codec(static_cast<v1::ChunkCodec>(c.codec));
        sum->set_stored_length(c.stored_length);
        sum->set_stored_crc32c(c.stored_crc32c);
        sum->set_element_bytes(static_cast<uint32_t>(c.element_bytes));
        stored += c.stored_length;
        if (c.delta_base != nullptr) {
          sum->set_delta_base_step(c.delta_base_step);
          sum->set_delta_ordinal(c.delta_ordinal);
          *sum->mutable_delta_base() = *c.delta_base;
        }
      }
      bytes_written_ += bytes;
      bytes_stored_ += stored;
      // Storage's counter: the memory tier writes none.
      if (!ToMemory(tier_)) {
        context_.bytes_written.fetch_add(bytes, std::memory_order_relaxed);
        written_metric_.Increment(static_cast<double>(bytes));
      }
    } else {
      // ABORTED is the writers' "save abandoned": chunks skipped, not a
      // failed write.
      if (!absl::IsAborted(status)) context_.metrics.IoError(metrics::IoOp::kWrite);
      if (error_.ok()) FailLocked(WithContext(status, Who()));
    }
    finish = ReadyToFinishLocked();
    cleanup = ReadyToCleanUpLocked();
  }
  if (finish) StartFinish();
  if (cleanup) CleanUp();
}

bool SaveSession::ReadyToFinishLocked() {
  if (phase_ != Phase::kSnapshot || !error_.ok()) return false;
  if (!snapshots_.has_value() || !snapshots_->complete() || pending_chunks_ != 0 || busy_ != 0) {
    return false;
  }
  phase_ = Phase::kCommitting;
  times_.written = absl::Now();
  ++busy_;
  return true;
}

void SaveSession::StartReceivingReplicas() {
  v1::ReplicaPlan plan;
  std::string dir;
  {
    absl::MutexLock lock(&mu_);
    plan = assignment_.replicas();
    dir = absl::StrCat(store_.root(), "/", assignment_.partial_dir());
    if (plan.receive_from_size() == 0) {
      replicas_received_ = absl::OkStatus();
      return;
    }
  }
  auto receive = [self = shared_from_this(), plan = std::move(plan), dir = std::move(dir)] {
    absl::Status status =
        self->context_.peer == nullptr
            ? absl::FailedPreconditionError(
                  "other hosts replicate to this one, but it has no peer data channel "
                  "(--peer_address)")
            : tier::ReceiveReplicas(
                  *self->context_.peer, self->store_backend_, dir, plan,
                  [&] { return self->abandoned_.load(std::memory_order_acquire); },
                  absl::Now() + self->context_.options.snapshot_timeout);
    absl::MutexLock lock(&self->mu_);
    self->replicas_received_ = status;
  };
  if (context_.background == nullptr) {
    absl::MutexLock lock(&mu_);
    replicas_received_ = absl::FailedPreconditionError("this ckptd has no background threads");
    return;
  }
  context_.background->Spawn(std::move(receive));
}

absl::Status SaveSession::ExchangeReplicas() {
  v1::ReplicaPlan plan;
  v1::ErasurePlan erasure;
  std::string dir;
  {
    absl::MutexLock lock(&mu_);
    plan = assignment_.replicas();
    erasure = assignment_.erasure();
    dir = absl::StrCat(store_.root(), "/", assignment_.partial_dir());
  }
  const absl::Time start = absl::Now();
  uint64_t shares_sent = 0;
  absl::Status coded = tier::ExchangeStripes(
      context_.peer, store_backend_, dir, erasure, context_.host.host(),
      [this] { return abandoned_.load(std::memory_order_acquire); },
      absl::Now() + context_.options.snapshot_timeout, &shares_sent);
  context_.peer_bytes_sent.fetch_add(shares_sent, std::memory_order_relaxed);
  if (!coded.ok()) return WithContext(coded, "erasure coding this host's part");
  uint64_t bytes_sent = 0;
  absl::Status sent = tier::SendReplicas(
      store_backend_, dir, plan, [this] { return abandoned_.load(std::memory_order_acquire); },
      &bytes_sent);
  context_.peer_bytes_sent.fetch_add(bytes_sent, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](SaveSession* s)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->replicas_received_.has_value(); },
      this));
  if (!sent.ok()) return WithContext(sent, "sending this host's replicas");
  if (!replicas_received_->ok()) {
    return WithContext(*replicas_received_, "receiving replicas from other hosts");
  }
  times_.replicate = absl::Now() - start;
  return absl::OkStatus();
}

void SaveSession::StartFinish() {
  if (!spans_hosts() || context_.background == nullptr) {
    Finish();  // the embedded coordinator commits at once
    return;
  }
  // The commit waits for every other host: not on this writer or handler.
  std::shared_ptr<SaveSession> self = shared_from_this();
  context_.background->Spawn([self] { self->Finish(); });
}

void SaveSession::Finish() {
  v1::NodePersistReport report;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    *report.mutable_host() = context_.host;
    report.set_save_id(assignment_.save_id());
    report.set_tier(tier_);
    for (const std::string& f : assignment_.hosts(0).files()) report.add_files(f);
    for (const v1::ChunkChecksum& c : checksums_) *report.add_checksums() = c;
  }
  // Durable data first: the manifest must never point at unsynced chunks.
  const absl::Time sync_start = absl::Now();
  for (auto& file : files_) {
    if (status.ok()) status = file->Sync();
    if (status.ok()) status = file->Close();
  }
  if (!status.ok()) context_.metrics.IoError(metrics::IoOp::kSync);
  FaultPoint("save.data_synced");
  // A memory-tier save spread over hosts reports once its replicas are in
  // place on other hosts and theirs here: the commit waits for every copy.
  const bool replicated = spans_hosts() && ToMemory(tier_);
  if (status.ok() && replicated) status = ExchangeReplicas();
  const absl::Time commit_start = absl::Now();
  absl::StatusOr<v1::CommitResult> result;
  if (status.ok()) {
    {
      absl::MutexLock lock(&mu_);
      reported_ = true;
    }
    result = coordinator_->ReportPersisted(report);
    status = result.status();
  }
  if (status.ok() && replicated) status = CommitHere(*result);
  const absl::Time commit_end = absl::Now();
  bool cleanup = false;
  {
    absl::MutexLock lock(&mu_);
    --busy_;
    if (status.ok()) {
      // Committed: a cancel or a rank that went away since changes nothing.
      error_ = absl::OkStatus();
      phase_ = Phase::kDone;
      committed_path_ = result->path();
      times_.fsync = commit_start - sync_start;
      times_.commit = commit_end - commit_start;
      ReportEndLocked();
      context_.commits.fetch_add(1, std::memory_order_relaxed);
      files_.clear();
      for (auto& [id, room] : rooms_) {
        if (room.has_allocation) context_.pool.Free(room.allocation);
      }
      rooms_.clear();
      // Storage counts a durable step now; a memory+durable one holds its
      // reservation until it is persisted.
      std::shared_ptr<void> disk_hold = std::move(disk_reservation_);
      ReleaseLocked();
      // Persisted from the memory copy, after the commit: the trainer's
      // wait ends with the memory commit.
      if (ToMemory(tier_) && CorruptionPoint("memory.after_commit")) {
        (void)context_.memory_tier->FlipByte(job_, step_,
                                             absl::StrCat("data/", context_.host.host(), "-"));
      }
      if (tier_ == v1::SAVE_TIER_MEMORY_AND_DURABLE)
        context_.memory_tier->PersistLater(job_, step_, std::move(disk_hold));
    } else {
      if (error_.ok()) error_ = WithContext(status, Who());
      phase_ = Phase::kFailed;
      abandoned_.store(true, std::memory_order_release);
      cleanup = ReadyToCleanUpLocked();
    }
  }
  if (cleanup) CleanUp();
}

absl::Status SaveSession::CommitHere(const v1::CommitResult& result) {
  v1::CheckpointManifest manifest;
  std::string partial;
  v1::MemoryTierJob protection;
  {
    absl::MutexLock lock(&mu_);
    partial = assignment_.partial_dir();
    protection.set_copies(1 + assignment_.replicas().send_to_size());
    const v1::ErasurePlan& erasure = assignment_.erasure();
    if (!erasure.stripes().empty()) {
      protection.set_erasure(absl::StrCat(erasure.k(), "+", erasure.m()));
    }
  }
  absl::Status status;
  if (!manifest.ParseFromString(result.manifest()) || manifest.job() != job_ ||
      manifest.step() != step_) {
    status = absl::InternalError("the coordinator's commit carries no manifest of this step");
  }
  absl::StatusOr<std::string> path =
      status.ok() ? context_.memory_tier->CommitHere(manifest, partial, protection)
                  : absl::StatusOr<std::string>(status);
  if (path.ok()) return absl::OkStatus();
  // The cluster has the step; this host does not: its ranks must know.
  return absl::DataLossError(
      absl::StrCat("step ", step_, " committed at the coordinator, but host ", context_.host.host(),
                   " could not keep its part in its memory tier: ", path.status().message()));
}

void SaveSession::Fail(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    FailLocked(status);
  }
  CleanUpIfDue();
}

void SaveSession::RankGone(int rank) {
  {
    absl::MutexLock lock(&mu_);
    const bool planned = planned_.Arrived(rank);
    const bool snapshotted = snapshots_.has_value() && snapshots_->Arrived(rank);
    if (rank < 0 || rank >= world_size_ || snapshotted) return;
    if (phase_ == Phase::kPlanning && !planned && planned_.arrived() == 0) return;
    FailLocked(absl::AbortedError(
        absl::StrCat(Who(), ": rank ", rank,
                     " went away (its process exited or its connection closed) before its snapshot "
                     "completed; aborted")));
  }
  CleanUpIfDue();
}

void SaveSession::CleanUpIfDue() {
  bool cleanup = false;
  {
    absl::MutexLock lock(&mu_);
    cleanup = ReadyToCleanUpLocked();
  }
  if (cleanup) CleanUp();
}

void SaveSession::FailLocked(const absl::Status& status) {
  if (phase_ == Phase::kDone || phase_ == Phase::kCommitting || !error_.ok()) {
    // Past the point of no return a commit decides; record the first error
    // only for a save that has not started committing.
    if (phase_ == Phase::kCommitting && error_.ok()) error_ = status;
    if (phase_ == Phase::kCommitting) abandoned_.store(true, std::memory_order_release);
    return;
  }
  error_ = status;
  phase_ = Phase::kFailed;
  abandoned_.store(true, std::memory_order_release);
}

bool SaveSession::ReadyToCleanUpLocked() {
  if (phase_ != Phase::kFailed || cleaned_ || busy_ != 0 || pending_chunks_ != 0) return false;
  cleaned_ = true;
  return true;
}

void SaveSession::CleanUp() {
  v1::AbortSaveRequest abort;
  std::vector<std::string> own_files;
  {
    absl::MutexLock lock(&mu_);
    abort.set_save_id(assignment_.save_id());
    abort.set_reason(std::string(error_.message()));
    abort.set_job(job_);
    abort.set_step(step_);
    *abort.mutable_host() = context_.host;
    // Once reported, the files are the coordinator's to keep (it may commit
    // them though this host's call failed) or to remove with the partial
    // directory.
    if (spans_hosts() && assignment_.hosts_size() == 1 && !reported_) {
      for (const std::string& name : assignment_.hosts(0).files()) {
        own_files.push_back(absl::StrCat(store_.root(), "/", assignment_.partial_dir(), "/", name));
      }
    }
    // In memory, the directory is this host's own (the coordinator's is in
    // its memory): replicas go with it.
    if (spans_hosts() && ToMemory(tier_) && !assignment_.partial_dir().empty()) {
      own_files.push_back(absl::StrCat(store_.root(), "/", assignment_.partial_dir()));
    }
    abort.set_tier(tier_);
    for (auto& [id, room] : rooms_) {
      if (room.has_allocation) context_.pool.Free(room.allocation);
    }
    rooms_.clear();
  }
  for (auto& file : files_) file->Abandon();
  files_.clear();
  // This host's files go even when the coordinator cannot be reached to
  // remove the whole partial directory (its restart removes the rest).
  for (const std::string& path : own_files) (void)store_backend_.RemoveAll(path);
  // Without a save id the save may still be gathering at the coordinator
  // (spread over hosts): it is aborted by job and step, so the other hosts
  // stop waiting for this one.
  if (!abort.save_id().empty() || spans_hosts()) coordinator_->AbortSave(abort);
  absl::MutexLock lock(&mu_);
  ReportEndLocked();
  cleanup_done_ = true;
  ReleaseLocked();
}

void SaveSession::ReportEndLocked() {
  metrics::SaveReport report;
  report.job = job_;
  report.step = step_;
  report.status = phase_ == Phase::kDone ? absl::OkStatus() : error_;
  report.bytes = bytes_written_;
  report.stored_bytes = bytes_stored_;
  if (codec_.has_value()) report.codec = std::string(codec::CodecName(*codec_));
  report.duration = absl::Now() - times_.created;
  report.stages.plan = times_.planned - times_.created;
  report.stages.snapshot = times_.snapshotted - times_.planned;
  report.stages.write = times_.written - times_.planned;
  report.stages.fsync = times_.fsync;
  report.stages.commit = times_.commit;
  context_.metrics.SaveEnded(report);
}

void SaveSession::ReleaseLocked() {
  // Committed (the step's files count as held now) or cleaned up (its files
  // are gone): the room it was promised goes back.
  memory_room_.reset();
  disk_reservation_.reset();
  delta_.reset();  // its pin on the base step
  erasure_prefix_.reset();
  ranks_.clear();
  std::vector<v1::ChunkChecksum>().swap(checksums_);
  // FindSave still finds a finished save by its id.
  v1::SaveAssignment kept;
  kept.set_save_id(assignment_.save_id());
  assignment_ = std::move(kept);
}

absl::StatusOr<v1::WaitSaveResponse> SaveSession::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](SaveSession* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
                             return s->phase_ == Phase::kDone ||
                                    (s->phase_ == Phase::kFailed && s->cleanup_done_);
                           },
                           this),
                       timeout);
  v1::WaitSaveResponse response;
  response.set_step(step_);
  if (phase_ == Phase::kDone) {
    response.set_done(true);
    response.set_path(committed_path_);
    return response;
  }
  if (phase_ == Phase::kFailed && cleanup_done_) return error_;
  return response;  // still going
}

void SaveSession::CheckDeadlines(absl::Time now) {
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    failure = DeadlineFailureLocked(now);
  }
  if (!failure.ok()) Fail(failure);
}

absl::Status SaveSession::DeadlineFailureLocked(absl::Time now) {
  if (phase_ == Phase::kPlanning && busy_ == 0 && error_.ok()) {
    // A rank that cannot come fails the barrier now, not at its deadline.
    const std::vector<int> attached = context_.sessions.RanksOf(job_);
    auto planned = [&](int r) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // called here, under mu_
      return planned_.Arrived(r);
    };
    absl::Status absent = absent_.Check(now, context_.options.rank_grace, attached, planned);
    if (!absent.ok()) {
      return absl::Status(absent.code(), absl::StrCat(Who(), ": ", absent.message()));
    }
  }
  if (phase_ == Phase::kPlanning && busy_ == 0 && planned_.Expired(now)) {
    return absl::DeadlineExceededError(
        absl::StrCat(Who(), ": ranks ", MissingLocked(planned_), " on host ", context_.host.host(),
                     " did not ask to save within ",
                     absl::FormatDuration(context_.options.plan_timeout), "; aborted"));
  }
  if (phase_ == Phase::kSnapshot && snapshots_.has_value() && snapshots_->Expired(now)) {
    return absl::DeadlineExceededError(
        absl::StrCat(Who(), ": ranks ", MissingLocked(*snapshots_), " on host ",
                     context_.host.host(), " did not finish their snapshot within ",
                     absl::FormatDuration(context_.options.snapshot_timeout), "; aborted"));
  }
  return absl::OkStatus();
}

bool SaveSession::finished() const {
  absl::MutexLock lock(&mu_);
  return phase_ == Phase::kDone || (phase_ == Phase::kFailed && cleanup_done_);
}

const char* SaveSession::PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kPlanning:
      return "planning";
    case Phase::kSnapshot:
      return "snapshot";
    case Phase::kCommitting:
      return "committing";
    case Phase::kDone:
      return "done";
    case Phase::kFailed:
      return "failed";
  }
  return "unknown";
}

v1::SaveProgress SaveSession::Progress() const {
  absl::MutexLock lock(&mu_);
  v1::SaveProgress p;
  p.set_job(job_);
  p.set_step(step_);
  p.set_phase(phase_ == Phase::kSnapshot && snapshots_.has_value() && snapshots_->arrived() > 0
                  ? "writing"
                  : PhaseName(phase_));
  p.set_bytes_total(bytes_total_);
  p.set_bytes_written(bytes_written_);
  p.set_ranks_snapshotted(snapshots_.has_value() ? snapshots_->arrived() : 0);
  p.set_world_size(world_size_);
  p.set_elapsed_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(absl::Now() - created_)));
  return p;
}

}  // namespace ckpt::session
