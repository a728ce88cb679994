#include "daemon/server/save_session.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/fault_points.h"
#include "daemon/coordinator/save_planner.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/validation.h"

namespace ckpt::server {
namespace {

using coordinator::AlignUp;

// Checks one rank's request on its own, before the barrier, so bad input
// gets its error at once instead of a timeout.
absl::Status ValidateRankRequest(const v1::PlanSaveRequest& request) {
  for (const v1::TensorShard& shard : request.shards()) {
    if (absl::Status s = ValidateShard(shard).status(); !s.ok()) return s;
  }
  for (const v1::ObjectDesc& object : request.objects()) {
    if (absl::Status s = ValidateName("object", object.key()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

SaveSession::SaveSession(NodeContext& context, std::string job, int64_t step, int world_size)
    : context_(context), job_(std::move(job)), step_(step), world_size_(world_size) {
  absl::MutexLock lock(&mu_);
  ranks_.resize(world_size);
  deadline_ = absl::Now() + context_.options.plan_timeout;
}

SaveSession::~SaveSession() = default;

std::string SaveSession::save_id() const {
  absl::MutexLock lock(&mu_);
  return assignment_.save_id();
}

absl::StatusOr<v1::PlanSaveResponse> SaveSession::Plan(const RankSession& rank,
                                                       const v1::PlanSaveRequest& request) {
  const std::string who = absl::StrCat("save of job ", job_, " step ", step_, ": rank ", rank.rank, ": ");
  if (absl::Status s = ValidateRankRequest(request); !s.ok()) {
    Fail(absl::AbortedError(absl::StrCat("rank ", rank.rank, " sent an invalid plan: ", s.message())));
    return Prefixed(s, who);
  }
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (rank.world_size != world_size_) {
      return absl::InvalidArgumentError(absl::StrCat(who, "world size ", rank.world_size,
                                                     " differs from the save's ", world_size_));
    }
    RankState& state = ranks_[rank.rank];
    if (state.request.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(who, "already sent its plan"));
    }
    state.request = request;
    last = ++arrived_ == world_size_;
    if (last) busy_ = true;
  }
  if (last) PlanAllRanks();

  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](SaveSession* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->phase_ != Phase::kPlanning;
      },
      this));
  if (!error_.ok()) return error_;
  const RankState& state = ranks_[rank.rank];
  v1::PlanSaveResponse response;
  response.set_save_id(assignment_.save_id());
  response.set_chunk_bytes(assignment_.chunk_bytes());
  response.mutable_lease()->set_offset(state.lease.offset);
  response.mutable_lease()->set_length(state.has_lease ? state.lease.length : 0);
  for (const v1::SaveItem& item : state.items) *response.add_items() = item;
  return response;
}

void SaveSession::PlanAllRanks() {
  v1::NodeSavePlan plan;
  {
    absl::MutexLock lock(&mu_);
    *plan.mutable_host() = context_.host;
    plan.set_job(job_);
    plan.set_step(step_);
    plan.set_world_size(world_size_);
    plan.set_writer_threads(context_.writers.threads());
    for (int r = 0; r < world_size_; ++r) {
      const v1::PlanSaveRequest& request = *ranks_[r].request;
      if (r == 0) plan.set_partial(request.partial());
      v1::RankSavePlan* rank = plan.add_ranks();
      rank->set_rank(r);
      *rank->mutable_shards() = request.shards();
      *rank->mutable_objects() = request.objects();
      for (const auto& [k, v] : request.user_metadata()) (*plan.mutable_user_metadata())[k] = v;
    }
  }
  absl::StatusOr<v1::SaveAssignment> assignment = context_.coordinator.PlanSave(plan);
  if (!assignment.ok()) {
    bool cleanup = false;
    {
      absl::MutexLock lock(&mu_);
      busy_ = false;
      FailLocked(Prefixed(assignment.status(),
                          absl::StrCat("save of job ", job_, " step ", step_, ": ")));
      // Finished once cleaned: otherwise the failed session would keep its
      // (job, step) slot and refuse every later save of that step.
      cleanup = ReadyToCleanUpLocked();
    }
    if (cleanup) CleanUp();
    return;
  }
  // Each rank's items and their room in its lease.
  std::vector<std::vector<v1::SaveItem>> items(world_size_);
  std::vector<uint64_t> lease_bytes(world_size_, 0);
  const uint64_t alignment = context_.pool.alignment();
  const v1::HostAssignment& host = assignment->hosts(0);
  for (const v1::WriteItem& write : host.items()) {
    v1::SaveItem item;
    item.set_kind(write.is_object() ? v1::SaveItem::OBJECT : v1::SaveItem::SHARD);
    item.set_index(write.index());
    item.set_bytes(write.bytes());
    item.set_padded_bytes(AlignUp(write.bytes(), alignment));
    lease_bytes[write.rank()] += item.padded_bytes();
    items[write.rank()].push_back(item);
  }
  // Leases: the pool bounds what is in flight, so this may wait (stall).
  std::vector<pool::Allocation> leases(world_size_);
  std::vector<bool> has_lease(world_size_, false);
  absl::Status status;
  const absl::Time pool_deadline = absl::Now() + context_.options.pool_wait_timeout;
  for (int r = 0; r < world_size_ && status.ok(); ++r) {
    if (lease_bytes[r] == 0) continue;
    absl::StatusOr<pool::Allocation> lease = context_.pool.Allocate(lease_bytes[r], pool_deadline);
    if (!lease.ok()) {
      status = Prefixed(lease.status(), absl::StrCat("save of job ", job_, " step ", step_,
                                                     ": lease for rank ", r, ": "));
      break;
    }
    leases[r] = *lease;
    has_lease[r] = true;
  }
  std::vector<std::unique_ptr<storage::WritableFile>> files;
  for (const std::string& name : host.files()) {
    if (!status.ok()) break;
    const std::string path =
        absl::StrCat(context_.coordinator.root(), "/", assignment->partial_dir(), "/", name);
    absl::StatusOr<std::unique_ptr<storage::WritableFile>> file =
        context_.backend.NewWritableFile(path);
    if (!file.ok()) {
      status = file.status();
      break;
    }
    files.push_back(std::move(*file));
  }
  bool cleanup = false;
  {
    absl::MutexLock lock(&mu_);
    assignment_ = std::move(*assignment);
    files_ = std::move(files);
    for (int r = 0; r < world_size_; ++r) {
      ranks_[r].items = std::move(items[r]);
      ranks_[r].lease = leases[r];
      ranks_[r].has_lease = has_lease[r];
    }
    // Index each rank's write items parallel to its SaveItems.
    for (const v1::WriteItem& write : assignment_.hosts(0).items()) {
      RankState& rank = ranks_[write.rank()];
      const int kind = write.is_object() ? v1::SaveItem::OBJECT : v1::SaveItem::SHARD;
      rank.item_of[{kind, write.index()}] = rank.writes.size();
      rank.writes.push_back(&write);
    }
    for (const v1::WriteItem& write : assignment_.hosts(0).items()) bytes_total_ += write.bytes();
    for (RankState& rank : ranks_) {
      rank.received.assign(rank.items.size(), 0);
      rank.lease_start.assign(rank.items.size(), 0);
    }
    busy_ = false;
    if (!status.ok()) FailLocked(status);
    if (error_.ok()) {
      phase_ = Phase::kSnapshot;
      deadline_ = absl::Now() + context_.options.snapshot_timeout;
    }
    cleanup = ReadyToCleanUpLocked();
  }
  if (cleanup) {
    CleanUp();
    return;
  }
  FaultPoint("save.planned");
}

absl::Status SaveSession::AcceptPiece(RankState& state, const v1::SnapshotRef& ref,
                                      std::map<int, std::vector<WriteTask>>& tasks,
                                      std::vector<PullJob>& pulls) {
  const uint64_t lease_bytes = state.has_lease ? state.lease.length : 0;
  const uint64_t alignment = context_.pool.alignment();
  const uint64_t chunk = assignment_.chunk_bytes();
  const std::string name = absl::StrCat(ref.kind() == v1::SaveItem::OBJECT ? "object " : "shard ",
                                        ref.index());
  auto found = state.item_of.find({static_cast<int>(ref.kind()), ref.index()});
  if (found == state.item_of.end()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " was not assigned to this rank"));
  }
  const size_t i = found->second;
  const v1::SaveItem& item = state.items[i];
  const uint64_t piece = ref.memory().length();
  const uint64_t at = ref.item_offset();
  if (at != state.received[i]) {
    return absl::InvalidArgumentError(absl::StrCat("piece of ", name, " at item offset ", at,
                                                   " does not follow the ", state.received[i],
                                                   " bytes already received"));
  }
  if (at > item.bytes() || piece > item.bytes() - at) {
    return absl::InvalidArgumentError(absl::StrCat("piece of ", name, " [", at, ", +", piece,
                                                   ") exceeds its ", item.bytes(), " bytes"));
  }
  // An object is one stored chunk (its manifest entry has one CRC), so it
  // comes and is written in one piece whatever its size.
  const bool object = item.kind() == v1::SaveItem::OBJECT;
  if (object && (at != 0 || piece != item.bytes())) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be handed over in one piece"));
  }
  if (at + piece < item.bytes() && (piece == 0 || piece % chunk != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("piece of ", name, " has ", piece,
                                                   " bytes; all but the last must be whole ",
                                                   chunk, "-byte chunks"));
  }
  const uint64_t offset = ref.memory().offset();
  if (offset < at || (offset - at) % alignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("memory reference of ", name, " at offset ",
                                                   offset, " is not ", alignment, "-aligned"));
  }
  const uint64_t start = offset - at;
  if (at == 0) {
    if (start > lease_bytes || item.padded_bytes() > lease_bytes - start) {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory reference of ", name, " [", start, ", ", start + item.padded_bytes(),
          ") lies outside the caller's lease of ", lease_bytes, " bytes"));
    }
    // No two items may share lease bytes.
    auto next = state.claimed.lower_bound(start);
    const bool hits_next = next != state.claimed.end() && next->first < start + item.padded_bytes();
    const bool hits_prev = next != state.claimed.begin() && std::prev(next)->second > start;
    if (item.padded_bytes() > 0 && (hits_next || hits_prev)) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory reference of ", name, " overlaps another item at lease offset ", start));
    }
    if (item.padded_bytes() > 0) state.claimed[start] = start + item.padded_bytes();
    state.lease_start[i] = start;
  } else if (start != state.lease_start[i]) {
    return absl::InvalidArgumentError(absl::StrCat("pieces of ", name,
                                                   " are not contiguous in the lease"));
  }
  char* data = context_.pool.base() + state.lease.offset + start;
  const v1::WriteItem& write = *state.writes[i];
  if (ref.pull()) {
    if (item.kind() != v1::SaveItem::SHARD || at != 0 || piece != item.bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull of ", name, " must cover the whole shard in one piece"));
    }
    const v1::TensorShard& shard = state.request->shards(static_cast<int>(item.index()));
    if (!shard.has_device_buffer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull of ", name, " but its plan gave no device buffer"));
    }
    if (!context_.gpu.HasDevice()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pull of tensor ", shard.fqn(), " over CUDA IPC: ckptd has ", context_.gpu.Describe(),
          "; use the push path or host tensors"));
    }
    pulls.push_back(PullJob{shard.device_buffer(), data, &item, &write});
    state.received[i] += piece;
    return absl::OkStatus();
  }
  std::shared_ptr<SaveSession> self = shared_from_this();
  const uint64_t step = object ? std::max<uint64_t>(item.bytes(), 1) : chunk;
  for (uint64_t off = at; off < at + piece; off += step) {
    const uint64_t payload = std::min(step, item.bytes() - off);
    if (off + payload == item.bytes()) {
      // The pad after the payload is written too (O_DIRECT wants whole
      // blocks); zero it so files do not carry stale pool bytes.
      std::memset(data + item.bytes(), 0, item.padded_bytes() - item.bytes());
    }
    tasks[write.writer()].push_back(WriteTask{self, write.writer(), write.file_offset() + off,
                                              data + off, AlignUp(payload, alignment), payload});
  }
  state.received[i] += piece;
  return absl::OkStatus();
}

absl::Status SaveSession::SubmitSnapshot(const RankSession& rank,
                                         const v1::SubmitSnapshotRequest& request) {
  const std::string who = absl::StrCat("save of job ", job_, " step ", step_, ": rank ", rank.rank, ": ");
  std::map<int, std::vector<WriteTask>> tasks;
  std::vector<PullJob> pulls;
  bool finish = false;
  absl::Status bad;
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (phase_ != Phase::kSnapshot) {
      return absl::FailedPreconditionError(absl::StrCat(who, "snapshot before the plan"));
    }
    RankState& state = ranks_[rank.rank];
    if (state.snapshotted) {
      return absl::FailedPreconditionError(absl::StrCat(who, "snapshot already complete"));
    }
    for (const v1::SnapshotRef& ref : request.refs()) {
      bad = AcceptPiece(state, ref, tasks, pulls);
      if (!bad.ok()) break;
    }
    if (bad.ok() && !request.more()) {
      for (size_t i = 0; i < state.items.size(); ++i) {
        if (state.received[i] != state.items[i].bytes()) {
          bad = absl::InvalidArgumentError(absl::StrCat(
              "snapshot ended with ", state.received[i], " of the ", state.items[i].bytes(),
              " bytes of ", state.items[i].kind() == v1::SaveItem::OBJECT ? "object " : "shard ",
              state.items[i].index()));
          break;
        }
      }
    }
    if (!bad.ok()) {
      bad = Prefixed(bad, who);
      FailLocked(absl::AbortedError(absl::StrCat("rank ", rank.rank, " sent a bad snapshot: ",
                                                 bad.message())));
    } else {
      for (const auto& [writer, list] : tasks) {
        pending_chunks_ += list.size();
      }
      // With pulls still to run, the rank is snapshotted only after them.
      if (!request.more() && pulls.empty()) {
        state.snapshotted = true;
        ++snapshotted_;
      }
      finish = ReadyToFinishLocked();
    }
  }
  if (!bad.ok()) {
    CleanUpIfDue();
    return bad;
  }
  for (auto& [writer, list] : tasks) context_.writers.Submit(writer, std::move(list));
  if (finish) Finish();
  if (pulls.empty()) return absl::OkStatus();

  for (const PullJob& job : pulls) {
    if (absl::Status s = RunPull(rank.id, job); !s.ok()) {
      s = Prefixed(s, who);
      Fail(s);
      return s;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (!request.more()) {
      ranks_[rank.rank].snapshotted = true;
      ++snapshotted_;
    }
    finish = ReadyToFinishLocked();
  }
  if (finish) Finish();
  return absl::OkStatus();
}

absl::Status SaveSession::RunPull(const std::string& session, const PullJob& job) {
  absl::StatusOr<std::shared_ptr<gpu::IpcMapping>> mapping =
      context_.ipc.Get(session, job.source.ipc_handle(), job.source.device(),
                       job.source.allocation_bytes());
  if (!mapping.ok()) return mapping.status();
  if (job.source.offset() > (*mapping)->bytes() ||
      job.item->bytes() > (*mapping)->bytes() - job.source.offset()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device buffer [", job.source.offset(), ", +", job.item->bytes(),
        ") lies outside its allocation of ", (*mapping)->bytes(), " bytes"));
  }
  const uint64_t alignment = context_.pool.alignment();
  uint64_t chunk = 0;
  {
    absl::MutexLock lock(&mu_);
    chunk = assignment_.chunk_bytes();
  }
  std::memset(job.destination + job.item->bytes(), 0, job.item->padded_bytes() - job.item->bytes());
  std::shared_ptr<SaveSession> self = shared_from_this();
  const char* source = static_cast<const char*>((*mapping)->device_ptr()) + job.source.offset();
  return context_.gpu.CopyDeviceToHost(
      source, job.destination, job.item->bytes(), chunk, [&](uint64_t offset, uint64_t length) {
        // Each landed chunk is written at once: copying overlaps writing.
        std::vector<WriteTask> tasks;
        for (uint64_t off = offset; off < offset + length; off += chunk) {
          const uint64_t payload = std::min(chunk, offset + length - off);
          tasks.push_back(WriteTask{self, job.write->writer(), job.write->file_offset() + off,
                                    job.destination + off, AlignUp(payload, alignment), payload});
        }
        {
          absl::MutexLock lock(&mu_);
          pending_chunks_ += tasks.size();
        }
        context_.writers.Submit(job.write->writer(), std::move(tasks));
      });
}

storage::WritableFile* SaveSession::File(int index) { return files_[index].get(); }

bool SaveSession::Abandoned() { return abandoned_.load(std::memory_order_acquire); }

void SaveSession::OnChunksWritten(absl::Span<const WrittenChunk> chunks, absl::Status status) {
  bool finish = false;
  bool cleanup = false;
  {
    absl::MutexLock lock(&mu_);
    pending_chunks_ -= chunks.size();
    if (status.ok()) {
      for (const WrittenChunk& c : chunks) {
        v1::ChunkChecksum* sum = &checksums_.emplace_back();
        sum->set_file(assignment_.hosts(0).files(c.file));
        sum->set_file_offset(c.file_offset);
        sum->set_crc32c(c.crc32c);
        bytes_written_ += c.payload;
        context_.bytes_written.fetch_add(c.payload, std::memory_order_relaxed);
      }
    } else if (error_.ok()) {
      FailLocked(Prefixed(status, absl::StrCat("save of job ", job_, " step ", step_, ": ")));
    }
    finish = ReadyToFinishLocked();
    cleanup = ReadyToCleanUpLocked();
  }
  if (finish) Finish();
  if (cleanup) CleanUp();
}

bool SaveSession::ReadyToFinishLocked() {
  if (phase_ != Phase::kSnapshot || !error_.ok()) return false;
  if (snapshotted_ != world_size_ || pending_chunks_ != 0) return false;
  phase_ = Phase::kCommitting;
  busy_ = true;
  return true;
}

void SaveSession::Finish() {
  v1::NodePersistReport report;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    *report.mutable_host() = context_.host;
    report.set_save_id(assignment_.save_id());
    for (const std::string& f : assignment_.hosts(0).files()) report.add_files(f);
    for (const v1::ChunkChecksum& c : checksums_) *report.add_checksums() = c;
  }
  // Durable data first: the manifest must never point at unsynced chunks.
  for (auto& file : files_) {
    if (status.ok()) status = file->Sync();
    if (status.ok()) status = file->Close();
  }
  FaultPoint("save.data_synced");
  absl::StatusOr<v1::CommitResult> result;
  if (status.ok()) {
    result = context_.coordinator.ReportPersisted(report);
    status = result.status();
  }
  bool cleanup = false;
  {
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (status.ok() && error_.ok()) {
      phase_ = Phase::kDone;
      committed_path_ = result->path();
      context_.commits.fetch_add(1, std::memory_order_relaxed);
      files_.clear();
      for (RankState& rank : ranks_) {
        if (rank.has_lease) context_.pool.Free(rank.lease);
        rank.has_lease = false;
      }
    } else {
      FailLocked(status.ok() ? error_ : Prefixed(status, absl::StrCat("save of job ", job_, " step ", step_, ": ")));
      cleanup = ReadyToCleanUpLocked();
    }
  }
  if (cleanup) CleanUp();
}

void SaveSession::Fail(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    FailLocked(status);
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
  if (phase_ == Phase::kDone || !error_.ok()) return;
  error_ = status;
  phase_ = Phase::kFailed;
  abandoned_.store(true, std::memory_order_release);
}

bool SaveSession::ReadyToCleanUpLocked() {
  if (phase_ != Phase::kFailed || cleaned_ || busy_ || pending_chunks_ != 0) return false;
  cleaned_ = true;
  return true;
}

void SaveSession::CleanUp() {
  std::string save_id;
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    save_id = assignment_.save_id();
    reason = std::string(error_.message());
    for (RankState& rank : ranks_) {
      if (rank.has_lease) context_.pool.Free(rank.lease);
      rank.has_lease = false;
    }
  }
  for (auto& file : files_) (void)file->Close();
  files_.clear();
  if (!save_id.empty()) context_.coordinator.AbortSave(save_id, reason);
  absl::MutexLock lock(&mu_);
  cleanup_done_ = true;
}

absl::StatusOr<v1::WaitSaveResponse> SaveSession::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](SaveSession* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->phase_ == Phase::kDone || (s->phase_ == Phase::kFailed && s->cleanup_done_);
      },
      this));
  if (!error_.ok()) return error_;
  v1::WaitSaveResponse response;
  response.set_step(step_);
  response.set_path(committed_path_);
  return response;
}

void SaveSession::CheckDeadlines(absl::Time now) {
  absl::Status timeout;
  {
    absl::MutexLock lock(&mu_);
    if (now < deadline_) return;
    if (phase_ == Phase::kPlanning && !busy_) {
      std::vector<int> missing;
      for (int r = 0; r < world_size_; ++r) {
        if (!ranks_[r].request.has_value()) missing.push_back(r);
      }
      timeout = absl::DeadlineExceededError(absl::StrCat(
          "save of job ", job_, " step ", step_, ": ranks [", absl::StrJoin(missing, ", "),
          "] did not ask to save within ", absl::FormatDuration(context_.options.plan_timeout),
          "; aborted"));
    } else if (phase_ == Phase::kSnapshot) {
      std::vector<int> missing;
      for (int r = 0; r < world_size_; ++r) {
        if (!ranks_[r].snapshotted) missing.push_back(r);
      }
      if (missing.empty()) return;
      timeout = absl::DeadlineExceededError(absl::StrCat(
          "save of job ", job_, " step ", step_, ": ranks [", absl::StrJoin(missing, ", "),
          "] did not finish their snapshot within ",
          absl::FormatDuration(context_.options.snapshot_timeout), "; aborted"));
    } else {
      return;
    }
  }
  Fail(timeout);
}

bool SaveSession::finished() const {
  absl::MutexLock lock(&mu_);
  return phase_ == Phase::kDone || (phase_ == Phase::kFailed && cleanup_done_);
}

const char* SaveSession::PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kPlanning: return "planning";
    case Phase::kSnapshot: return "snapshot";
    case Phase::kCommitting: return "committing";
    case Phase::kDone: return "done";
    case Phase::kFailed: return "failed";
  }
  return "unknown";
}

v1::SaveProgress SaveSession::Progress() const {
  absl::MutexLock lock(&mu_);
  v1::SaveProgress p;
  p.set_job(job_);
  p.set_step(step_);
  p.set_phase(phase_ == Phase::kSnapshot && snapshotted_ > 0 ? "writing" : PhaseName(phase_));
  p.set_bytes_total(bytes_total_);
  p.set_bytes_written(bytes_written_);
  p.set_ranks_snapshotted(snapshotted_);
  p.set_world_size(world_size_);
  return p;
}

}  // namespace ckpt::server
