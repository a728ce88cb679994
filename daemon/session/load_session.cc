#include "daemon/session/load_session.h"

#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <prometheus/counter.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/retention.h"
#include "daemon/fault/fault_points.h"
#include "daemon/peer/peer_sender.h"
#include "daemon/planning/node_load_plan.h"
#include "daemon/storage/chunk_reader.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/step_location.h"
#include "daemon/tier/erasure_transfer.h"
#include "daemon/tier/memory_tier.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/secure_random.h"
#include "proto/lib/segment_handover.h"
#include "proto/lib/status_context.h"
#include "proto/lib/stored_chunk.h"

namespace ckpt::session {
std::optional<size_t> LoadSession::InPlaceChunkAt(const std::vector<InPlaceChunk>& chunks,
                                                  uint64_t room_offset) {
  auto after = std::upper_bound(
      chunks.begin(), chunks.end(), room_offset,
      [](uint64_t offset, const InPlaceChunk& c) { return offset < c.room_offset; });
  if (after == chunks.begin()) return std::nullopt;
  return static_cast<size_t>(std::prev(after) - chunks.begin());
}

std::optional<uint64_t> LoadSession::InPlaceChunkOf(const std::vector<InPlaceChunk>& chunks,
                                                    const v1::Delivery& d) {
  const uint64_t count = std::max<uint64_t>(d.count(), 1);
  if (count > 1 && d.src_stride() > (UINT64_MAX - d.length()) / (count - 1)) return std::nullopt;
  const uint64_t span = (count - 1) * d.src_stride() + d.length();
  if (span == 0) return 0;  // touches nothing
  const std::optional<size_t> at = InPlaceChunkAt(chunks, d.pool_offset());
  if (!at.has_value()) return std::nullopt;
  const InPlaceChunk& c = chunks[*at];
  const uint64_t within = d.pool_offset() - c.room_offset;
  if (within > c.length || span > c.length - within) return std::nullopt;
  return c.memory_offset + within;
}

LoadSession::LoadSession(NodeContext& context, std::string job, int64_t step, int world_size,
                         int local_world_size)
    : context_(context),
      job_(std::move(job)),
      step_(step),
      world_size_(world_size),
      local_world_size_(local_world_size),
      asked_(world_size, local_world_size, absl::Now() + context.options.plan_timeout),
      absent_(job_, world_size, local_world_size),
      read_metric_(context.metrics.ReadBytes(job_)) {
  absl::MutexLock lock(&mu_);
  created_at_ = absl::Now();
}

LoadSession::~LoadSession() {
  // Reader tasks hold a reference: none is queued or running any more.
  Fail(absl::CancelledError(absl::StrCat(Who(), ": abandoned")));
  absl::MutexLock lock(&mu_);
  FreeReadyRoomsLocked();
}

std::string LoadSession::Who() const {
  return absl::StrCat("load of job ", job_, " step ",
                      step_ < 0 ? std::string("latest") : absl::StrCat(step_));
}

v1::LoadProgress LoadSession::Progress() const {
  absl::MutexLock lock(&mu_);
  v1::LoadProgress p;
  p.set_job(job_);
  p.set_step(step_);
  p.set_phase(planned_ ? "reading" : "waiting for ranks");
  p.set_bytes_total(bytes_to_read_);
  p.set_bytes_read(bytes_read_.load(std::memory_order_relaxed));
  p.set_ranks_arrived(asked_.arrived());
  p.set_world_size(world_size_);
  p.set_elapsed_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(absl::Now() - created_at_)));
  return p;
}

std::string LoadSession::load_id() const {
  absl::MutexLock lock(&mu_);
  return load_id_;
}

absl::Status LoadSession::CheckRankLocked(const RankSession& rank) const {
  if (absl::Status s = CheckMember(rank, job_, world_size_, absl::StrCat(Who(), ": ")); !s.ok())
    return s;
  if (rank.local_world_size != local_world_size_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": rank ", rank.rank, " says ", rank.local_world_size,
                     " of the job's ranks are on this host; the load counts ", local_world_size_));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::LoadResponse> LoadSession::Load(const RankSession& rank,
                                                   const v1::LoadRequest& request) {
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = CheckRankLocked(rank); !s.ok()) return s;
    if (!error_.ok()) return error_;
    RankState& state = ranks_[rank.rank];
    if (state.request.has_value() || planned_) {
      return absl::FailedPreconditionError(
          absl::StrCat(Who(), ": rank ", rank.rank, " asked twice"));
    }
    absl::StatusOr<bool> completes = asked_.Arrive(rank.rank);
    if (!completes.ok()) {
      return WithContext(completes.status(), absl::StrCat(Who(), ": rank ", rank.rank));
    }
    state.request = request;
    state.session_id = rank.id;
    last = *completes;
    if (last) planning_ = true;
  }
  if (last) {
    absl::Status status = Plan();
    absl::MutexLock lock(&mu_);
    planning_ = false;
    if (!status.ok()) FailLocked(status);
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](LoadSession* s)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->planned_ || !s->error_.ok(); },
      this));
  if (!error_.ok()) return error_;
  v1::LoadResponse response;
  response.set_step(assignment_.step());
  response.set_tier(from_memory_ ? "memory" : "durable");
  response.set_load_id(load_id_);
  response.set_memory_bytes(memory_bytes_);
  for (uint64_t bytes : object_bytes_[rank.rank]) response.add_object_bytes(bytes);
  return response;
}

absl::Status LoadSession::Plan() {
  v1::NodeLoadPlan plan;
  std::vector<std::vector<bool>> on_device(world_size_);
  std::string gpu_tensor;  // the first on a GPU
  {
    absl::MutexLock lock(&mu_);
    planning::LoadRequests requests;
    for (const auto& [r, state] : ranks_) {
      requests[r] = &*state.request;
      for (const v1::TensorShard& t : state.request->tensors()) {
        on_device[r].push_back(t.has_device_buffer());
        if (t.has_device_buffer() && gpu_tensor.empty()) {
          gpu_tensor = absl::StrCat("tensor ", t.fqn(), " of rank ", r);
        }
      }
    }
    plan = planning::BatchLoadRequests(context_.host, job_, step_, requests);
  }
  const v1::LoadTier from = plan.tier();
  if (!gpu_tensor.empty() && !context_.gpu.HasDevice()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": ", gpu_tensor, " is on a GPU but ckptd has ",
                     context_.gpu.Describe(), "; use the push path or host tensors"));
  }
  std::unique_ptr<storage::FileLock> pin;
  // Without a cluster, each host of a spanning job plans (and reads) its
  // own ranks' part, as a job on one host does.
  const bool spans = world_size_ > local_world_size_ && context_.coordinator_client != nullptr;
  // Spread over hosts, the coordinator chooses the tier for all of them
  // (the plan carries the lowest rank's).
  absl::StatusOr<std::optional<int64_t>> in_memory =
      spans ? std::optional<int64_t>() : StoresOf(context_).MemoryStepToLoad(job_, step_, from);
  if (!in_memory.ok()) return WithContext(in_memory.status(), Who());
  absl::StatusOr<v1::LoadAssignment> assignment = absl::NotFoundError("not planned");
  bool memory = false;
  tier::HeldStepCheck check;
  // A load on one host from memory: the files checked as its ranks
  // attached (early_step_check.h). Waited for before the plan pins the
  // step: the check pins it too, and a gc waiting in between would keep
  // the two waiting on each other.
  std::map<std::string, tier::FileStamp> checked_early;
  if (in_memory->has_value()) {
    if (context_.step_checks != nullptr) {
      checked_early = context_.step_checks->VerifiedFiles(job_, **in_memory);
    }
    plan.set_step(**in_memory);
    assignment = context_.memory_tier->coordinator().PlanLoad(plan, &pin);
    memory = assignment.ok();
    if (memory && !checked_early.empty()) context_.step_checks->CountUsed();
    // Dropped from memory since (the budget, retention): storage may have it.
    if (absl::IsNotFound(assignment.status()) && from != v1::LOAD_TIER_MEMORY) {
      plan.set_step(step_);
    } else if (!assignment.ok()) {
      return WithContext(assignment.status(), Who());
    }
  }
  if (!memory) {
    assignment =
        spans ? PlanAcrossHosts(plan, &pin, &check) : context_.coordinator.PlanLoad(plan, &pin);
  }
  if (!assignment.ok()) return WithContext(assignment.status(), Who());
  if (spans && assignment->from_memory()) memory = true;  // PlanAcrossHosts checked the tier
  const bool spread = assignment->has_peers();
  if (spread) {
    if (absl::Status s = CheckPeers(*assignment); !s.ok()) return WithContext(s, Who());
  }

  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  assignment_ = std::move(*assignment);
  pin_ = std::move(pin);
  from_memory_ = memory;
  read_backend_ = memory ? &context_.memory_tier->backend() : &context_.backend;
  if (memory) {
    // All the load's rebuilt files (the coordinator names them to every
    // host), and those of its own part of the rebuild.
    rebuilt_by_.insert(assignment_.rebuilt_files().begin(), assignment_.rebuilt_files().end());
    for (const tier::LostShare& lost : tier::LostShares(assignment_.rebuild())) {
      for (const std::string& file : lost.files) rebuilt_by_[file] = lost.rebuilder;
    }
  }
  // Unguessable: a load's id asks the segment socket for its memory space.
  load_id_ = absl::StrCat("load-", RandomHex(8));
  object_bytes_.assign(world_size_, {});
  for (const v1::LoadAssignment::RankSizes& sizes : assignment_.sizes()) {
    if (sizes.rank() < 0 || sizes.rank() >= world_size_) continue;
    object_bytes_[sizes.rank()].assign(sizes.object_bytes().begin(), sizes.object_bytes().end());
  }
  // Every file verified as the ranks attached, and the ranks copy it all
  // (ckptd copies to GPUs through the pool): larger batches.
  const bool any_device = std::any_of(on_device.begin(), on_device.end(), [](const auto& rank) {
    return std::find(rank.begin(), rank.end(), true) != rank.end();
  });
  const bool all_checked =
      memory && !any_device && !checked_early.empty() &&
      std::all_of(assignment_.reads().begin(), assignment_.reads().end(),
                  [&](const v1::ChunkRead& r) { return checked_early.contains(r.chunk().file()); });
  std::vector<planning::LoadGroup> planned =
      spread ? planning::GroupSpreadLoadReads(assignment_, world_size_, on_device,
                                              context_.pool.alignment())
             : planning::GroupLoadReads(assignment_, world_size_, on_device,
                                        all_checked ? VerifiedLoadGroupBytes(context_.options)
                                                    : LoadGroupBytes(context_.options),
                                        context_.pool.alignment());
  if (spread) {
    uint16_t index = 0;
    std::vector<std::string> hosts;
    for (const auto& [host, address] : assignment_.peers().addresses()) hosts.push_back(host);
    std::sort(hosts.begin(), hosts.end());
    for (const std::string& host : hosts) peer_index_[host] = index++;
    peers_ = assignment_.peers();
    peer_prefix_ =
        context_.peer->OpenPrefix(assignment_.peers().load_id(), assignment_.peers().secret());
    early_prefix_.reset();
  }
  groups_.resize(planned.size());
  for (size_t g = 0; g < planned.size(); ++g) {
    for (const planning::GroupChunk& chunk : planned[g].chunks) {
      // What other hosts send is not read here: progress counts storage reads.
      if (chunk.source.empty()) bytes_to_read_ += chunk.chunk->length();
    }
    groups_[g].plan = std::move(planned[g]);
    std::vector<uint32_t>& order = groups_[g].by_offset;
    const std::vector<planning::GroupChunk>& chunks = groups_[g].plan.chunks;
    for (uint32_t c = 0; c < chunks.size(); ++c) order.push_back(c);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return chunks[a].room_offset < chunks[b].room_offset;
    });
    for (int r = 0; r < world_size_; ++r) {
      if (groups_[g].plan.host[r].empty()) continue;  // only this host's ranks have any
      ranks_[r].groups.push_back(g);
      ++groups_[g].consumers_left;
    }
    for (const planning::DeviceCopy& copy : groups_[g].plan.device) {
      std::vector<size_t>& device = ranks_[copy.rank].device_groups;
      if (groups_[g].plan.host[copy.rank].empty() && (device.empty() || device.back() != g)) {
        device.push_back(g);
      }
    }
  }
  const bool checked = memory && check.step == assignment_.step();
  if (checked) {
    // Its set-aside chunks come from another copy: counted as the load's.
    fallback_chunks_.fetch_add(check.bad_chunks, std::memory_order_relaxed);
    context_.load_fallback_chunks.fetch_add(check.bad_chunks, std::memory_order_relaxed);
    for (uint64_t i = 0; i < check.bad_chunks; ++i) context_.metrics.LoadFallback(job_);
  }
  if (from_memory_) {
    ShareMemoryFilesLocked(assignment_.checkpoint_path(), checked ? check.verified : checked_early);
  }
  planned_ = true;
  planned_at_ = absl::Now();
  if (groups_.empty()) return absl::OkStatus();
  // As many groups in flight as there are reader threads.
  const int tasks =
      std::max(1, std::min<int>(context_.readers.threads(), static_cast<int>(groups_.size())));
  std::shared_ptr<LoadSession> self = shared_from_this();
  for (int t = 0; t < tasks; ++t) {
    if (!context_.readers.Submit([self] { self->ReadNextGroup(); })) {
      return absl::UnavailableError(absl::StrCat(Who(), ": ckptd is shutting down"));
    }
    ++readers_running_;
  }
  return absl::OkStatus();
}

void LoadSession::ReadNextGroup() {
  size_t index = 0;
  bool in_place = false;
  bool needs_room = false;  // in place, but peers send it chunks
  std::string dir;
  absl::Time wait_start;
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok() || next_to_read_ >= groups_.size()) {
      --readers_running_;
      if (!error_.ok()) FreeReadyRoomsLocked();
      // The last reader of a load whose ranks are done: what it forwarded
      // for other hosts is sent too.
      if (readers_running_ == 0 && done_ranks_ == local_world_size_) pin_.reset();
      return;
    }
    index = next_to_read_++;
    wait_start = absl::Now();
    groups_[index].state = GroupState::kReading;
    in_place = groups_[index].in_place;
    needs_room = !groups_[index].plan.incoming.empty();
    dir = assignment_.checkpoint_path();
  }
  // A group read in place with nothing from peers needs no room, unless a
  // chunk fails there: verified before its turn, so that it then takes its
  // room in order (after its turn, the rooms could all be held by later
  // groups whose ranks wait for this one).
  bool verified = false;
  if (in_place && !needs_room) {
    const Group* group = nullptr;
    {
      absl::MutexLock lock(&mu_);
      group = &groups_[index];
    }
    verified = VerifyInPlace(*group);
    if (!verified) {
      absl::MutexLock lock(&mu_);
      groups_[index].in_place = false;  // through a room, and the next tier
    }
  }
  {
    // Rooms in group order: wait for the earlier groups to have theirs (their
    // tasks took them first and are running, so this cannot wait on a task
    // still queued).
    absl::MutexLock lock(&mu_);
    std::pair<LoadSession*, size_t> turn(this, index);
    mu_.Await(absl::Condition(
        +[](std::pair<LoadSession*, size_t>* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return p->first->next_to_allocate_ == p->second || !p->first->error_.ok();
        },
        &turn));
  }
  // A group read in place takes a room only for what peers send it.
  absl::Status status = verified ? absl::OkStatus() : TakeRoom(index);
  times_.room_wait.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - wait_start),
                             std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    ++next_to_allocate_;
  }
  // A reader per task: it caches the group's open files, a handful.
  storage::ChunkReader reader(*read_backend_, dir, context_.pool.alignment());
  uint64_t verified_in_place = 0;
  if (status.ok()) status = ReadGroup(index, reader, verified, &verified_in_place);
  context_.memory_bytes_in_place.fetch_add(verified_in_place, std::memory_order_relaxed);
  if (from_memory_) {
    // Storage's counters count storage: what came from memory is its own.
    context_.memory_bytes_read.fetch_add(reader.chunk_bytes_read() + verified_in_place,
                                         std::memory_order_relaxed);
  } else {
    context_.bytes_read.fetch_add(reader.bytes_read(), std::memory_order_relaxed);
    context_.chunk_bytes_read.fetch_add(reader.chunk_bytes_read(), std::memory_order_relaxed);
    read_metric_.Increment(static_cast<double>(reader.bytes_read()));
  }
  bytes_read_.fetch_add(reader.bytes_read() + verified_in_place, std::memory_order_relaxed);
  times_.io.fetch_add(absl::ToInt64Nanoseconds(reader.io_time()), std::memory_order_relaxed);
  times_.verify.fetch_add(absl::ToInt64Nanoseconds(reader.verify_time()),
                          std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    if (!status.ok()) FailLocked(status);
    Group& group = groups_[index];
    if (!error_.ok()) {
      if (group.has_room) context_.pool.Free(group.room);
      group.has_room = false;
      group.state = GroupState::kReleased;
    } else {
      group.state = GroupState::kReady;
      if (group.consumers_left == 0) ReleaseLocked(index);  // device deliveries only
    }
  }
  // Back of the queue: concurrent loads take turns on the readers.
  std::shared_ptr<LoadSession> self = shared_from_this();
  if (!context_.readers.Submit([self] { self->ReadNextGroup(); })) {
    absl::MutexLock lock(&mu_);
    --readers_running_;
    FailLocked(absl::UnavailableError(absl::StrCat(Who(), ": ckptd is shutting down")));
  }
}

bool LoadSession::VerifyInPlace(const Group& group) {
  const absl::Time start = absl::Now();
  bool verified = true;
  uint64_t checked_early = 0;
  // A group's chunks come from a few files: each stamped once, as the
  // group is handed out.
  int stamped_fd = -1;
  std::optional<tier::FileStamp> stamp;
  for (const InPlaceChunk& c : group.in_place_chunks) {
    if (failed_.load(std::memory_order_acquire)) {
      verified = false;  // nothing counted for a load that failed elsewhere
      break;
    }
    if (c.checked.has_value() && c.fd != stamped_fd) {
      stamped_fd = c.fd;
      stamp = tier::StampOf(c.fd);
    }
    if (c.checked.has_value() && stamp == c.checked) {
      checked_early += c.length;
      continue;
    }
    if (Crc32c(c.data, c.length) != c.chunk->crc32c()) {
      std::fprintf(stderr,
                   "ckptd: load job=%s: %s at offset %llu (%s) fails its CRC32C in place; "
                   "reading its group through the pool\n",
                   job_.c_str(), c.chunk->file().c_str(),
                   static_cast<unsigned long long>(c.chunk->file_offset()),
                   std::string(c.owner).c_str());
      verified = false;
      break;
    }
  }
  times_.verify.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start), std::memory_order_relaxed);
  if (verified) {
    context_.memory_bytes_checked_early.fetch_add(checked_early, std::memory_order_relaxed);
  }
  return verified;
}

void LoadSession::ShareMemoryFilesLocked(const std::string& dir,
                                         const std::map<std::string, tier::FileStamp>& checked) {
  storage::MemoryBackend& backend = context_.memory_tier->backend();
  // Files start on huge page boundaries of the space (segment_handover.h).
  constexpr uint64_t kAlign = segments::kHugePageBytes;
  for (Group& group : groups_) {
    const planning::LoadGroup& plan = group.plan;
    // The daemon's own copies to GPUs read the room.
    if (!plan.device.empty()) continue;
    std::vector<InPlaceChunk> chunks;
    bool ok = true;
    // Where what peers send starts: this host's reads come first in a room.
    uint64_t received_from = plan.room_bytes;
    for (const planning::GroupTransfer& t : plan.incoming)
      received_from = std::min(received_from, t.room_offset);
    for (const planning::GroupChunk& c : plan.chunks) {
      const v1::StoredChunk& stored = *c.chunk;
      if (!c.source.empty()) continue;  // a peer sends it
      if (stored.length() == 0) continue;
      // An encoded chunk (or a delta) must be decoded into the room first.
      if (IsEncoded(stored) || stored.has_delta_base()) {
        ok = false;
        break;
      }
      auto it = memory_files_.find(stored.file());
      if (it == memory_files_.end()) {
        // A short, missing or oddly named file is read through the pool,
        // which reports it as any load does.
        if (memory_files_.size() >= segments::kMaxSegments ||
            !storage::ValidateConfinedName(stored.file()).ok()) {
          ok = false;
          break;
        }
        absl::StatusOr<std::shared_ptr<const storage::MemoryBackend::SharedFile>> shared =
            backend.Share(absl::StrCat(dir, "/", stored.file()));
        if (!shared.ok() || (*shared)->data == nullptr) {
          ok = false;
          break;
        }
        const uint64_t offset = memory_bytes_;
        memory_bytes_ = (offset + (*shared)->size + kAlign - 1) / kAlign * kAlign;
        it = memory_files_.emplace(stored.file(), SharedFileAt{*std::move(shared), offset}).first;
      }
      const storage::MemoryBackend::SharedFile& file = *it->second.file;
      if (stored.file_offset() > file.size || stored.length() > file.size - stored.file_offset()) {
        ok = false;
        break;
      }
      auto verified = checked.find(stored.file());
      chunks.push_back(
          {c.room_offset, stored.length(), file.data + stored.file_offset(),
           it->second.offset + stored.file_offset(), &stored, c.owner, file.fd,
           verified != checked.end() ? std::optional(verified->second) : std::nullopt});
    }
    if (!ok || chunks.empty()) continue;
    std::sort(chunks.begin(), chunks.end(), [](const InPlaceChunk& a, const InPlaceChunk& b) {
      return a.room_offset < b.room_offset;
    });
    // Every copy a rank makes must come out of one chunk read here, or out
    // of what peers send (from the room).
    for (const std::vector<v1::Delivery>& copies : plan.host) {
      for (const v1::Delivery& d : copies) {
        if (!InPlaceChunkOf(chunks, d).has_value() && d.pool_offset() < received_from) ok = false;
      }
    }
    if (!ok) continue;
    group.in_place = true;
    group.in_place_chunks = std::move(chunks);
  }
  if (memory_files_.empty()) memory_bytes_ = 0;
}

absl::StatusOr<pool::OwnerSegments> LoadSession::MemorySpace(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  if (job != job_ || !planned_ || done_ranks_ == local_world_size_) {
    return absl::NotFoundError("the load is unknown or over");
  }
  if (!error_.ok()) return error_;
  pool::OwnerSegments out;
  for (const auto& [name, at] : memory_files_) {
    const int fd = fcntl(at.file->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat(Who(), ": share ", name));
    out.fds.emplace_back(fd);
    out.ranges.push_back({at.offset, at.file->size, 0});
  }
  return out;
}

absl::Status LoadSession::TakeRoom(size_t index) {
  uint64_t bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    bytes = groups_[index].plan.room_bytes;
  }
  absl::StatusOr<pool::Allocation> room = context_.pool.Allocate(
      bytes, absl::Now() + context_.options.pool_wait_timeout,
      pool::Claim{job_, [this] { return failed_.load(std::memory_order_acquire); }});
  absl::MutexLock lock(&mu_);
  if (!room.ok()) return WithContext(room.status(), absl::StrCat(Who(), ": room to read into"));
  groups_[index].room = *room;
  groups_[index].has_room = true;
  return absl::OkStatus();
}

absl::Status LoadSession::ReadGroup(size_t index, storage::ChunkReader& reader, bool verified,
                                    uint64_t* in_place) {
  const Group* group = nullptr;
  char* room = nullptr;
  {
    absl::MutexLock lock(&mu_);
    group = &groups_[index];
    if (group->has_room) room = context_.pool.base() + group->room.offset;
  }
  // The plan is immutable once made and the room is this thread's until the
  // group is ready, so reading needs no lock.
  const planning::LoadGroup& plan = group->plan;
  if (failed_.load(std::memory_order_acquire)) return absl::CancelledError("load failed");
  // What other hosts send is expected before anything else: they may be
  // ahead of this host.
  std::vector<peer::ExpectedTransfer> incoming;
  for (const planning::GroupTransfer& t : plan.incoming) {
    incoming.emplace_back(context_.peer->Expect(
        absl::StrCat(Who(), ": group ", plan.peer_group, " from host ", t.host),
        room + t.room_offset, t.bytes,
        TransferToken(plan.peer_group, t.host, context_.host.host())));
  }
  if (group->in_place && !verified) {
    // Its room was taken for what peers send: the whole group fits in it.
    verified = VerifyInPlace(*group);
    if (!verified) {
      if (failed_.load(std::memory_order_acquire)) return absl::CancelledError("load failed");
      // Through the room: the chunk that failed is read again there and,
      // failing again, from the next tier.
      absl::MutexLock lock(&mu_);
      groups_[index].in_place = false;
    }
  }
  if (failed_.load(std::memory_order_acquire)) return absl::CancelledError("load failed");
  if (!verified && room == nullptr) {
    return absl::InternalError(absl::StrCat(Who(), ": group ", index, " has no room to read into"));
  }
  if (!verified) {
    std::vector<storage::ChunkTarget> targets;
    targets.reserve(plan.chunks.size());
    for (const planning::GroupChunk& chunk : plan.chunks) {
      if (chunk.source.empty())
        targets.push_back({chunk.chunk, chunk.owner, room + chunk.room_offset});
    }
    absl::Status read = reader.ReadAll(targets);
    if (absl::IsDataLoss(read) && from_memory_) read = ReadWithFallback(targets, reader);
    if (absl::Status s = read; !s.ok()) {
      // A load that failed elsewhere cancels its reads: not a storage error.
      if (!absl::IsCancelled(s)) context_.metrics.IoError(metrics::IoOp::kRead);
      return WithContext(s, Who());
    }
  }
  if (absl::Status s = ExchangeGroup(*group, room, incoming); !s.ok()) return s;
  if (verified) {
    for (const InPlaceChunk& c : group->in_place_chunks) *in_place += c.length;
  }
  const absl::Time deliver_start = absl::Now();
  absl::Status delivered = DeliverToDevices(plan, room);
  times_.deliver.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - deliver_start),
                           std::memory_order_relaxed);
  return delivered;
}

absl::Status LoadSession::ReadWithFallback(absl::Span<const storage::ChunkTarget> targets,
                                           storage::ChunkReader& memory) {
  std::unique_ptr<storage::FileLock> pin;
  std::unique_ptr<storage::ChunkReader> durable;
  int64_t step = 0;
  {
    absl::MutexLock lock(&mu_);
    step = assignment_.step();
  }
  for (const storage::ChunkTarget& target : targets) {
    const absl::Status in_memory = memory.Read(*target.chunk, target.owner, target.dst);
    if (!absl::IsDataLoss(in_memory)) {
      if (!in_memory.ok()) return in_memory;
      continue;
    }
    // Storage holds the same files when the step was persisted from memory;
    // whatever it holds is checked against the same CRC.
    if (durable == nullptr) {
      absl::StatusOr<std::unique_ptr<storage::FileLock>> pinned =
          coordinator::PinStep(context_.backend, context_.coordinator.root(), job_, step);
      if (!pinned.ok()) {
        // Spread over hosts, another host may hold a good copy: the next
        // load plans around this one.
        const bool spread = !peer_index_.empty() &&
                            context_.memory_tier->SetAside(job_, step, target.chunk->file());
        return WithContext(
            in_memory,
            absl::StrCat("in the memory tier, and storage has no step ", step,
                         " to read it from instead",
                         spread ? absl::StrCat("; this host's copy of ", target.chunk->file(),
                                               " is set aside: loading again takes it from "
                                               "another host's copy")
                                : ""));
      }
      pin = std::move(*pinned);
      absl::StatusOr<std::string> dir =
          storage::ResolveStepDir(context_.backend, context_.coordinator.root(), job_, step);
      if (!dir.ok()) return dir.status();
      durable =
          std::make_unique<storage::ChunkReader>(context_.backend, *dir, context_.pool.alignment());
    }
    const uint64_t before = durable->chunk_bytes_read();
    const uint64_t before_padded = durable->bytes_read();
    absl::Status from_storage = durable->Read(*target.chunk, target.owner, target.dst);
    context_.bytes_read.fetch_add(durable->bytes_read() - before_padded, std::memory_order_relaxed);
    context_.chunk_bytes_read.fetch_add(durable->chunk_bytes_read() - before,
                                        std::memory_order_relaxed);
    if (!from_storage.ok()) {
      return WithContext(from_storage, absl::StrCat("after the memory tier's copy failed (",
                                                    in_memory.message(), "), storage's"));
    }
    fallback_chunks_.fetch_add(1, std::memory_order_relaxed);
    used_durable_.store(true, std::memory_order_relaxed);
    {
      absl::MutexLock lock(&mu_);
      fallen_back_.insert(target.chunk);
    }
    context_.load_fallback_chunks.fetch_add(1, std::memory_order_relaxed);
    context_.metrics.LoadFallback(job_);
    std::fprintf(stderr, "ckptd: load-fallback job=%s step=%lld from=memory to=durable error=%s\n",
                 job_.c_str(), static_cast<long long>(step),
                 metrics::QuoteValue(in_memory.message()).c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::LoadAssignment> LoadSession::PlanAcrossHosts(
    v1::NodeLoadPlan& plan, std::unique_ptr<storage::FileLock>* pin, tier::HeldStepCheck* check) {
  plan.set_world_size(world_size_);
  plan.set_group_bytes(LoadGroupBytes(context_.options));
  plan.mutable_host()->set_address(context_.peer_address);  // empty: no channel, read it all here
  if (context_.memory_tier != nullptr && plan.tier() != v1::LOAD_TIER_DURABLE) {
    // Bad bytes are left out before the plan: it takes them from elsewhere.
    tier::HeldSteps held;
    if (context_.step_checks != nullptr) {
      *check = context_.step_checks->CheckForLoad(job_, step_, held);
    } else {
      held = context_.memory_tier->HeldSteps(job_);
      *check = tier::CheckHeldStep(*context_.memory_tier, job_, step_, held,
                                   context_.options.reader_threads);
    }
    for (auto& [step, files] : held) {
      v1::NodeLoadPlan::HeldStep* held = plan.add_memory_steps();
      held->set_step(step);
      for (std::string& file : files) held->add_files(std::move(file));
    }
  }
  absl::StatusOr<v1::LoadAssignment> assignment = context_.coordinator_client->PlanLoad(plan);
  if (!assignment.ok()) return assignment.status();
  if (assignment->from_memory() && context_.memory_tier == nullptr) {
    // Said before anything else fails for it (pinning the step in storage).
    return absl::FailedPreconditionError(absl::StrCat(
        Who(),
        ": the coordinator planned the load from the memory tier, but this ckptd has none "
        "(--memory_tier_bytes)"));
  }
  const bool memory = assignment->from_memory();
  // This host's path to the step (the storage is shared; mount points may differ).
  const std::string& root =
      memory ? context_.memory_tier->coordinator().root() : context_.coordinator.root();
  storage::Backend& backend = memory ? context_.memory_tier->backend() : context_.backend;
  if (memory) {
    assignment->set_checkpoint_path(storage::StepDir(root, job_, assignment->step()));
  } else {
    absl::StatusOr<std::string> dir =
        storage::ResolveStepDir(backend, root, job_, assignment->step());
    if (!dir.ok()) return dir.status();
    assignment->set_checkpoint_path(*dir);
  }
  if (memory && !assignment->rebuild().stripes().empty()) {
    if (absl::Status s = RebuildLostShares(*assignment); !s.ok()) {
      return WithContext(s, "rebuilding shares lost with a host from parity");
    }
  }
  absl::StatusOr<std::unique_ptr<storage::FileLock>> pinned =
      coordinator::PinStep(backend, root, job_, assignment->step());
  if (pinned.ok()) {
    *pin = std::move(*pinned);
  } else if (memory && absl::IsNotFound(pinned.status())) {
    // A host that holds none of the step (it lost its memory) gets it all from the others.
  } else if (absl::IsNotFound(pinned.status())) {
    return WithContext(pinned.status(), absl::StrCat("step ", assignment->step(),
                                                     " was deleted while the hosts planned"));
  } else if (backend.IsObjectStore()) {
    // gc on another host would not see this load: not read unpinned.
    return WithContext(pinned.status(),
                       absl::StrCat("pinning step ", assignment->step(), " against gc"));
  }  // else locks do not work on this filesystem: gc cannot take the step either
  return assignment;
}

absl::Status LoadSession::RebuildLostShares(const v1::LoadAssignment& assignment) {
  const v1::ErasureRebuild& rebuild = assignment.rebuild();
  tier::MemoryTier& memory = *context_.memory_tier;
  if (absl::Status s = tier::CheckRebuild(rebuild); !s.ok()) return s;
  std::string dir;
  bool rebuilder = false;
  for (const v1::StripeRebuild& sr : rebuild.stripes()) {
    rebuilder = rebuilder || sr.rebuilder() == context_.host.host();
  }
  v1::CheckpointManifest manifest;
  if (rebuilder) {
    if (!manifest.ParseFromString(rebuild.manifest()) || manifest.job() != job_ ||
        manifest.step() != assignment.step()) {
      return absl::InvalidArgumentError(
          "the coordinator's rebuild carries no manifest of the step");
    }
    absl::StatusOr<std::string> scratch = memory.NewScratchDir(job_, assignment.step());
    if (!scratch.ok()) return scratch.status();
    dir = *scratch;
  }
  // The other hosts may finish their part first and send this host its
  // chunks of the load meanwhile: they wait for it, not fail.
  std::shared_ptr<void> load_prefix;
  if (context_.peer != nullptr && assignment.has_peers()) {
    load_prefix =
        context_.peer->OpenPrefix(assignment.peers().load_id(), assignment.peers().secret());
  }
  const absl::Time start = absl::Now();
  uint64_t sent = 0;
  absl::Status status = tier::RunRebuild(
      context_.peer, memory.backend(),
      storage::StepDir(memory.coordinator().root(), job_, assignment.step()), dir, rebuild,
      context_.host.host(), [this] { return failed_.load(std::memory_order_acquire); },
      absl::Now() + context_.options.plan_timeout, &sent);
  context_.peer_bytes_sent.fetch_add(sent, std::memory_order_relaxed);
  if (rebuilder) {
    if (status.ok()) {
      status = memory.AdoptRebuilt(manifest, dir);
    } else {
      (void)memory.backend().RemoveAll(dir);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) early_prefix_ = std::move(load_prefix);
  }
  if (status.ok() && rebuilder) ReportRebuilt(rebuild, assignment.step());
  if (status.ok()) {
    std::fprintf(stderr,
                 "ckptd: rebuild job=%s step=%lld stripes=%d rebuilder=%s sent_bytes=%llu "
                 "seconds=%.3f\n",
                 job_.c_str(), static_cast<long long>(assignment.step()), rebuild.stripes_size(),
                 rebuilder ? "yes" : "no", static_cast<unsigned long long>(sent),
                 absl::ToDoubleSeconds(absl::Now() - start));
  }
  return status;
}

absl::Status LoadSession::CheckPeers(const v1::LoadAssignment& assignment) const {
  const v1::LoadPeers& peers = assignment.peers();
  if (context_.peer == nullptr) {
    return absl::FailedPreconditionError(
        "the coordinator spread the load over hosts, but this ckptd has no peer data channel "
        "(--peer_address)");
  }
  if (peers.secret().size() != peer::kTokenBytes / 2 || peers.addresses().size() > 65535 ||
      !peers.addresses().contains(context_.host.host())) {
    return absl::InvalidArgumentError("the coordinator's load plan names its peers wrongly");
  }
  auto known = [&](const std::string& host) {
    auto it = peers.addresses().find(host);
    return it != peers.addresses().end() && !it->second.empty() && host != context_.host.host();
  };
  auto check = [&](const v1::PeerRoute& route) -> absl::Status {
    bool ok = route.group() < peers.groups() &&
              (route.source_host().empty() || known(route.source_host()));
    for (const std::string& to : route.forward_to()) ok = ok && known(to);
    if (ok) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "the coordinator's load plan routes a chunk through a host it gives no address for, or "
        "in group ",
        route.group(), " of ", peers.groups()));
  };
  for (const v1::ChunkRead& read : assignment.reads()) {
    if (absl::Status s = check(read.route()); !s.ok()) return s;
  }
  for (const v1::ObjectRead& read : assignment.objects()) {
    if (absl::Status s = check(read.route()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

peer::PeerToken LoadSession::TransferToken(uint32_t group, const std::string& from,
                                           const std::string& to) const {
  return peer::TransferToken(peers_.load_id(), group, peer_index_.at(from), peer_index_.at(to),
                             peers_.secret());
}

absl::Status LoadSession::ExchangeGroup(const Group& in, char* room,
                                        std::vector<peer::ExpectedTransfer>& incoming) {
  const planning::LoadGroup& group = in.plan;
  const std::string& self = context_.host.host();
  // Fault tests kill a host here: it read its first group, sent nothing.
  FaultPoint("load.exchange");
  for (const planning::GroupTransfer& t : group.outgoing) {
    std::vector<peer::PeerBlockRef> blocks;
    uint64_t at = 0;
    for (size_t i : t.chunks) {
      const planning::GroupChunk& chunk = group.chunks[i];
      peer::PeerBlockRef& block = blocks.emplace_back();
      block.offset = at;
      block.length = chunk.chunk->length();
      at += block.length;
      if (!in.in_place) {
        block.data = room + chunk.room_offset;
        continue;
      }
      if (block.length == 0) continue;
      // Verified where it lies: sent from there (every chunk this host
      // reads is one of the group's in-place chunks).
      const std::optional<size_t> at = InPlaceChunkAt(in.in_place_chunks, chunk.room_offset);
      const InPlaceChunk* c = at.has_value() ? &in.in_place_chunks[*at] : nullptr;
      if (c == nullptr || c->room_offset != chunk.room_offset) {
        return absl::InternalError(absl::StrCat(Who(), ": chunk at ", chunk.chunk->file(),
                                                " offset ", chunk.chunk->file_offset(),
                                                " was planned in place but is not shared"));
      }
      block.file = c->fd;
      block.file_offset = chunk.chunk->file_offset();
    }
    const std::string& address = peers_.addresses().at(t.host);
    peer::PeerSendOptions options;
    options.claim_timeout = context_.options.peer_wait;
    options.cancelled = [this] { return failed_.load(std::memory_order_acquire); };
    if (absl::Status s =
            peer::PeerSend(address, TransferToken(group.peer_group, self, t.host), blocks, options);
        !s.ok()) {
      return WithContext(
          s, absl::StrCat(Who(), ": forwarding group ", group.peer_group, " to host ", t.host));
    }
    context_.peer_bytes_sent.fetch_add(t.bytes, std::memory_order_relaxed);
  }
  for (size_t k = 0; k < group.incoming.size(); ++k) {
    const planning::GroupTransfer& t = group.incoming[k];
    // A load failed meanwhile (a peer lost, a rank gone) stops waiting at once.
    const absl::Status s =
        incoming[k]->WaitUnless(absl::Now() + context_.options.peer_wait,
                                [this] { return failed_.load(std::memory_order_acquire); });
    if (absl::IsCancelled(s) && failed_.load(std::memory_order_acquire)) {
      return absl::CancelledError(absl::StrCat(Who(), ": failed while waiting for host ", t.host));
    }
    if (!s.ok()) return s;
    for (size_t i : t.chunks) {
      const planning::GroupChunk& chunk = group.chunks[i];
      if (Crc32c(room + chunk.room_offset, chunk.chunk->length()) != chunk.chunk->crc32c()) {
        return absl::DataLossError(absl::StrCat(
            Who(), ": ", chunk.owner, ": its chunk at ", chunk.chunk->file(), " offset ",
            chunk.chunk->file_offset(), " came from host ", t.host, " not matching its checksum"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LoadSession::DeliverToDevices(const planning::LoadGroup& group, const char* room) {
  for (const planning::DeviceCopy& copy : group.device) {
    std::string session;
    v1::TensorShard request;
    {
      absl::MutexLock lock(&mu_);
      session = ranks_[copy.rank].session_id;
      request = ranks_[copy.rank].request->tensors(static_cast<int>(copy.request));
    }
    const v1::DeviceBuffer& target = request.device_buffer();
    absl::StatusOr<std::shared_ptr<gpu::IpcMapping>> mapping =
        context_.ipc.Get(session, target.ipc_handle(), target.device(), target.allocation_bytes());
    if (!mapping.ok())
      return WithContext(mapping.status(), absl::StrCat(Who(), ": tensor ", request.fqn()));
    const v1::Delivery& d = copy.delivery;
    const uint64_t count = std::max<uint64_t>(d.count(), 1);
    const uint64_t bytes = (*mapping)->bytes();
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t dest = d.dest_offset() + i * d.dest_stride();
      if (target.offset() > bytes || dest > bytes - target.offset() ||
          d.length() > bytes - target.offset() - dest) {
        return absl::InvalidArgumentError(
            absl::StrCat(Who(), ": tensor ", request.fqn(), " of rank ", copy.rank,
                         ": device buffer [", target.offset(), ", +", dest + d.length(),
                         ") lies outside its allocation of ", bytes, " bytes"));
      }
      char* device = static_cast<char*>((*mapping)->device_ptr()) + target.offset() + dest;
      if (absl::Status s = context_.gpu.CopyHostToDevice(
              room + d.pool_offset() + i * d.src_stride(), device, d.length());
          !s.ok()) {
        return WithContext(s, absl::StrCat(Who(), ": tensor ", request.fqn()));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::LoadBatch> LoadSession::NextBatch(const RankSession& rank,
                                                     uint64_t done_batch_id, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckRankLocked(rank); !s.ok()) return s;
  if (!error_.ok()) return error_;
  if (!planned_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": rank ", rank.rank, " asked for a batch before the plan"));
  }
  RankState& state = ranks_[rank.rank];
  if (!state.held.empty() && done_batch_id != 0) {
    // Batch ids are group index + 1; the oldest held goes first.
    const auto [held, handed_at] = state.held.front();
    if (done_batch_id != held + 1) {
      return absl::InvalidArgumentError(absl::StrCat(Who(), ": rank ", rank.rank, " holds batch ",
                                                     held + 1, " but released ", done_batch_id));
    }
    state.held.pop_front();
    times_.deliver.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - handed_at),
                             std::memory_order_relaxed);
    ReleaseLocked(held);
  }
  v1::LoadBatch batch;
  std::pair<LoadSession*, int> landed(this, rank.rank);
  // A second batch only while the one held takes no room: two rooms held
  // by each rank could wedge a pool sized for one each. Until then (or
  // until the rank releases what it holds, past its last batch): nothing,
  // ask again.
  if (state.held.size() >= 2 ||
      (state.held.size() == 1 &&
       (groups_[state.held.front().first].has_room || state.next >= state.groups.size()))) {
    return batch;
  }
  if (state.next >= state.groups.size()) {
    // The daemon's own copies to the rank's GPU must have landed before the
    // rank hears that its load is over, and reads its tensors.
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::pair<LoadSession*, int>* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                               return p->first->DeviceCopiesLandedLocked(p->second);
                             },
                             &landed),
                         wait);
    if (!error_.ok()) return error_;
    if (!DeviceCopiesLandedLocked(rank.rank)) return batch;  // not yet: ask again
    if (!state.done) {
      state.done = true;
      SourcesLocked(rank.rank);  // counted in the host's before the load's end is reported
      if (++done_ranks_ == local_world_size_) {
        ReportEndLocked();
        // Every byte is delivered here: gc may have the step, unless readers
        // still forward chunks of it to other hosts (the last one lets go).
        if (readers_running_ == 0) pin_.reset();
        peer_prefix_.reset();
      }
    }
    batch.set_last(true);
    SetTiersLocked(rank.rank, batch);
    return batch;
  }
  const size_t index = state.groups[state.next];
  std::pair<LoadSession*, size_t> wanted(this, index);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](std::pair<LoadSession*, size_t>* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                             return p->first->groups_[p->second].state == GroupState::kReady ||
                                    !p->first->error_.ok();
                           },
                           &wanted),
                       wait);
  if (!error_.ok()) return error_;
  if (groups_[index].state != GroupState::kReady) return batch;  // not yet: ask again
  const Group& group = groups_[index];
  ++state.next;
  state.held.emplace_back(index, absl::Now());
  batch.set_batch_id(index + 1);
  batch.set_roomless(!group.has_room);
  batch.set_last(state.next >= state.groups.size());
  if (batch.last()) SetTiersLocked(rank.rank, batch);
  batch.set_segment_epoch(group.room.epoch);
  for (v1::Delivery d : group.plan.host[rank.rank]) {
    // Checked when planned: a copy lies in one chunk read in place, or in
    // what peers sent to the room.
    const std::optional<uint64_t> in_memory =
        group.in_place ? InPlaceChunkOf(group.in_place_chunks, d) : std::nullopt;
    if (in_memory.has_value()) {
      d.set_pool_offset(*in_memory);
      d.set_from_memory(true);
    } else {
      d.set_pool_offset(group.room.offset + d.pool_offset());
    }
    *batch.add_deliveries() = std::move(d);
  }
  return batch;
}

void LoadSession::SetTiersLocked(int rank, v1::LoadBatch& batch) {
  if (!planned_) return;
  batch.add_tiers(from_memory_ ? "memory" : "durable");
  if (used_durable_.load(std::memory_order_relaxed)) batch.add_tiers("durable");
  batch.set_fallback_chunks(fallback_chunks_.load(std::memory_order_relaxed));
  for (const v1::LoadSource& source : SourcesLocked(rank)) *batch.add_sources() = source;
  batch.set_device_bytes(ranks_[rank].device_bytes);
}

std::pair<std::string, std::string> LoadSession::SourceOfLocked(const Group& group,
                                                                const v1::Delivery& d) const {
  const std::string& self = context_.host.host();
  const std::vector<planning::GroupChunk>& chunks = group.plan.chunks;
  // The chunk that starts at or last before the delivery (planning puts
  // each delivery in one chunk).
  auto after =
      std::upper_bound(group.by_offset.begin(), group.by_offset.end(), d.pool_offset(),
                       [&](uint64_t offset, uint32_t c) { return offset < chunks[c].room_offset; });
  const planning::GroupChunk* chunk =
      after == group.by_offset.begin() ? nullptr : &chunks[*std::prev(after)];
  const std::string source = chunk == nullptr ? std::string() : chunk->source;
  if (from_memory_ && chunk != nullptr) {
    // Rebuilt from parity by the host it came from (this one, or a peer
    // that sent it): the rebuilder holds the only copy.
    auto rebuilt = rebuilt_by_.find(chunk->chunk->file());
    if (rebuilt != rebuilt_by_.end() && rebuilt->second == (source.empty() ? self : source)) {
      return {"parity", rebuilt->second};
    }
  }
  if (!source.empty()) return {"peer", source};
  if (!from_memory_ || (chunk != nullptr && fallen_back_.contains(chunk->chunk))) {
    return {"storage", self};
  }
  return {"memory", self};
}

const std::vector<v1::LoadSource>& LoadSession::SourcesLocked(int rank) {
  RankState& state = ranks_[rank];
  if (state.sources.has_value()) return *state.sources;
  std::map<std::pair<std::string, std::string>, uint64_t> bytes;
  auto count = [&](const Group& group, const v1::Delivery& d)
                   ABSL_NO_THREAD_SAFETY_ANALYSIS -> uint64_t {  // mu_ is held
    const uint64_t delivered = d.length() * std::max<uint64_t>(d.count(), 1);
    if (delivered > 0) bytes[SourceOfLocked(group, d)] += delivered;
    return delivered;
  };
  for (size_t g : state.groups) {
    for (const v1::Delivery& d : groups_[g].plan.host[rank]) count(groups_[g], d);
  }
  // The daemon's own copies to the rank's GPU (a group may hold only those
  // for it, and is then not among its groups).
  for (const Group& group : groups_) {
    for (const planning::DeviceCopy& copy : group.plan.device) {
      if (copy.rank == rank) state.device_bytes += count(group, copy.delivery);
    }
  }
  std::vector<v1::LoadSource>& out = state.sources.emplace();
  for (const auto& [key, n] : bytes) {
    v1::LoadSource& source = out.emplace_back();
    source.set_kind(key.first);
    source.set_host(key.second);
    source.set_bytes(n);
    delivered_[key] += n;
  }
  return out;
}

void LoadSession::ReportRebuilt(const v1::ErasureRebuild& rebuild, int64_t step) {
  // One line and count per lost host whose shares this host rebuilt.
  std::map<std::string, std::pair<std::set<std::string>, uint64_t>> by_host;
  for (const tier::LostShare& lost : tier::LostShares(rebuild)) {
    if (lost.rebuilder != context_.host.host()) continue;
    auto& [files, bytes] = by_host[lost.host];
    files.insert(lost.files.begin(), lost.files.end());
    bytes += lost.bytes;
  }
  for (const auto& [host, rebuilt] : by_host) {
    context_.metrics.ParityRebuilt(
        job_, step, host, std::vector<std::string>(rebuilt.first.begin(), rebuilt.first.end()),
        rebuilt.second);
  }
}

void LoadSession::ReportEndLocked() {
  // Operators see each load's outcome and where its time went (plan: the
  // ranks' barrier and the coordinator; read: the disk; verify: the CPU;
  // deliver: the copies into the ranks' tensors), which is what tuning
  // --reader_threads and --batch_bytes needs. Metrics never call back into
  // a session, so reporting under mu_ cannot deadlock.
  if (reported_) return;
  reported_ = true;
  auto ns = [](const std::atomic<int64_t>& t) {
    return absl::Nanoseconds(t.load(std::memory_order_relaxed));
  };
  metrics::LoadReport report;
  report.job = job_;
  report.step = planned_ ? assignment_.step() : step_;
  report.status = error_;
  report.bytes = bytes_read_.load(std::memory_order_relaxed);
  report.tier = !planned_ ? "" : from_memory_ ? "memory" : "durable";
  report.fallback_chunks = fallback_chunks_.load(std::memory_order_relaxed);
  for (const auto& [key, bytes] : delivered_)
    report.sources.push_back({key.first, key.second, bytes});
  report.duration = absl::Now() - created_at_;
  report.stages.plan = planned_at_ - created_at_;
  report.stages.read = ns(times_.io);
  report.stages.verify = ns(times_.verify);
  report.stages.deliver = ns(times_.deliver);
  context_.metrics.LoadEnded(report);
}

bool LoadSession::DeviceCopiesLandedLocked(int rank) const {
  if (!error_.ok()) return true;
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return true;
  for (size_t g : it->second.device_groups) {
    if (groups_[g].state != GroupState::kReady && groups_[g].state != GroupState::kReleased) {
      return false;
    }
  }
  return true;
}

void LoadSession::ReleaseLocked(size_t index) {
  Group& group = groups_[index];
  if (group.consumers_left > 0) --group.consumers_left;
  if (group.consumers_left > 0 || group.state != GroupState::kReady) return;
  if (group.has_room) context_.pool.Free(group.room);
  group.has_room = false;
  group.state = GroupState::kReleased;
}

void LoadSession::FreeReadyRoomsLocked() {
  // Only rooms no reader is filling: a reading group's room is freed by its
  // reader when it sees the error.
  for (Group& group : groups_) {
    if (group.state == GroupState::kReady && group.has_room) {
      context_.pool.Free(group.room);
      group.has_room = false;
      group.state = GroupState::kReleased;
    }
  }
}

void LoadSession::FailLocked(const absl::Status& status) {
  if (!error_.ok()) return;
  error_ = status;
  failed_.store(true, std::memory_order_release);
  pin_.reset();          // nothing more will be delivered: gc may have the step
  peer_prefix_.reset();  // senders still to come are refused at once
  early_prefix_.reset();
  FreeReadyRoomsLocked();
  ReportEndLocked();
}

void LoadSession::Fail(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (planned_ && done_ranks_ == local_world_size_) return;  // complete: nothing to fail
  FailLocked(status);
}

void LoadSession::RankGone(int rank) {
  absl::MutexLock lock(&mu_);
  if (rank < 0 || rank >= world_size_) return;
  auto it = ranks_.find(rank);
  if (it != ranks_.end() && it->second.done) return;
  if (!planned_ && it == ranks_.end() && asked_.arrived() == 0) return;
  FailLocked(absl::AbortedError(absl::StrCat(
      Who(), ": rank ", rank,
      " went away (its process exited or its connection closed) before its load completed; "
      "aborted")));
}

void LoadSession::PeersLost(const google::protobuf::RepeatedPtrField<std::string>& hosts) {
  absl::MutexLock lock(&mu_);
  if (!planned_ || peer_index_.empty() || done_ranks_ == local_world_size_) return;
  for (const std::string& host : hosts) {
    if (host == context_.host.host() || peer_index_.count(host) == 0) continue;
    FailLocked(absl::UnavailableError(absl::StrCat(
        Who(), ": host ", host,
        ", which this load exchanges chunks with, was lost to the coordinator (its ckptd died "
        "or its network is cut); aborted")));
    return;
  }
}

void LoadSession::CheckDeadlines(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (planned_ || planning_ || !error_.ok()) return;
  // A rank that cannot come fails the barrier now, not at its deadline.
  auto asked = [&](int r) ABSL_NO_THREAD_SAFETY_ANALYSIS { return asked_.Arrived(r); };  // mu_
  absl::Status gone =
      absent_.Check(now, context_.options.rank_grace, context_.sessions.RanksOf(job_), asked);
  if (!gone.ok()) {
    FailLocked(absl::Status(gone.code(), absl::StrCat(Who(), ": ", gone.message())));
    return;
  }
  if (!asked_.Expired(now)) return;
  // A job spread over hosts: which of its ranks are this host's, only their
  // sessions say.
  const bool spans = local_world_size_ < world_size_;
  const std::vector<int> here = spans ? context_.sessions.RanksOf(job_) : std::vector<int>();
  FailLocked(absl::DeadlineExceededError(
      absl::StrCat(Who(), ": ranks ", asked_.Missing(16, spans ? &here : nullptr), " on host ",
                   context_.host.host(), " did not ask within ",
                   absl::FormatDuration(context_.options.plan_timeout), "; aborted")));
}

bool LoadSession::finished() const {
  absl::MutexLock lock(&mu_);
  if (readers_running_ > 0 || planning_) return false;
  return !error_.ok() || (planned_ && done_ranks_ == local_world_size_);
}

}  // namespace ckpt::session
