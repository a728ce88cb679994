// One load of one job step on this host (docs/design.md §5). Ranks arrive with
// their requests; the last to arrive batches them into one NodeLoadPlan and
// gets the chunk reads from the coordinator. The reads are cut into groups
// of about --batch_bytes; the daemon's reader threads (ReaderPool) take the
// groups in order, a task per group, read each into pool room (waiting while the job's share is
// full), verify every CRC, deliver GPU destinations themselves, and hand the group to the ranks
// that need some of it. A rank copies its part straight from the pool into its tensors (one host
// copy) while the readers go on with the next groups, and asking for its next batch releases the
// previous one. A chunk several ranks need is read once.
//
// Rooms are allocated in group order, so the room held is always for the
// oldest groups not yet consumed, and each of those is the next one its
// ranks want: the load cannot wedge on its own pool share.
//
// A load from this host's memory tier reads in place where it can: the
// tier's files are shared read-only with the job's ranks (the load's memory
// space, LoadResponse.memory_bytes), the readers verify each chunk where it
// lies, and the ranks copy straight out of it: one copy, as from the pool,
// and none into it. A group with a chunk that fails verification there, or
// with copies the daemon makes itself (GPU pull), goes through the pool.
//
// A rank that goes away before its load completes fails the load on every
// rank, naming it, and everything is released.
//
// Thread-safety: all public methods are safe from any thread.
#ifndef CKPT_DAEMON_SESSION_LOAD_SESSION_H_
#define CKPT_DAEMON_SESSION_LOAD_SESSION_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/planning/load_groups.h"
#include "daemon/planning/rank_barrier.h"
#include "daemon/session/absent_ranks.h"
#include "daemon/session/node_context.h"
#include "daemon/storage/chunk_reader.h"
#include "daemon/storage/memory/memory_backend.h"
#include "daemon/tier/file_stamp.h"
#include "daemon/tier/held_step_check.h"

namespace ckpt::session {

class LoadSession : public std::enable_shared_from_this<LoadSession> {
 public:
  // local_world_size: the job's ranks on this host, which this load waits
  // for and plans (each host of a job spread over hosts plans its own).
  LoadSession(NodeContext& context, std::string job, int64_t step, int world_size,
              int local_world_size);
  ~LoadSession();

  // Blocks until every rank has asked and the load is planned.
  absl::StatusOr<v1::LoadResponse> Load(const RankSession& rank, const v1::LoadRequest& request);
  // Releases done_batch_id (if the rank holds it) and waits up to `wait` for
  // the rank's next group; batch id 0 without `last` means "not yet".
  absl::StatusOr<v1::LoadBatch> NextBatch(const RankSession& rank, uint64_t done_batch_id,
                                          absl::Duration wait);
  void Fail(const absl::Status& status);
  void RankGone(int rank);
  // The memory-tier files the load shares with `job`'s ranks, laid out in
  // its memory space: duplicates of read-only descriptors, for the segment
  // socket. NOT_FOUND once the load is over, or for another job.
  absl::StatusOr<pool::OwnerSegments> MemorySpace(const std::string& job) const;
  // The coordinator lost these hosts: a load spread over one of them fails.
  void PeersLost(const google::protobuf::RepeatedPtrField<std::string>& hosts);
  // Fails the load at its plan deadline, or before it once a rank it waits
  // for has had no session here for --rank_grace_s.
  void CheckDeadlines(absl::Time now);
  // Every rank is done or the load failed, and the readers have stopped.
  bool finished() const;
  const std::string& job() const { return job_; }
  bool spans_hosts() const { return local_world_size_ < world_size_; }
  std::string load_id() const;
  // For GetStatus: phase, bytes read of the total, time so far.
  v1::LoadProgress Progress() const;

 private:
  enum class GroupState { kWaiting, kReading, kReady, kReleased };
  // A chunk read in place: where its bytes lie in the memory tier, and in
  // the load's memory space.
  struct InPlaceChunk {
    uint64_t room_offset = 0;  // where the plan's deliveries expect it
    uint64_t length = 0;
    const char* data = nullptr;
    uint64_t memory_offset = 0;
    const v1::StoredChunk* chunk = nullptr;
    absl::string_view owner;
    int fd = -1;  // the shared file's, to send it to peers from (sendfile)
    // Verified before the plan (held_step_check.h), its file then as
    // this: not read again while the file still is (VerifyInPlace).
    std::optional<tier::FileStamp> checked;
  };
  struct Group {
    planning::LoadGroup plan;
    GroupState state = GroupState::kWaiting;
    pool::Allocation room;
    bool has_room = false;
    int consumers_left = 0;  // ranks that have not released it yet
    // The chunks this host reads are read in place, and sent to peers from
    // where they lie; its chunks by room_offset. A room only for what peers
    // send (its deliveries come from the pool). Cleared by the reader when a
    // chunk fails verification: the group then reads through a room.
    bool in_place = false;
    std::vector<InPlaceChunk> in_place_chunks;
    // plan.chunks' indices by room_offset: which chunk a delivery copies
    // from (each copies out of one), for the load's sources.
    std::vector<uint32_t> by_offset;
  };
  // A memory-tier file shared with the ranks, at its place in the load's
  // memory space.
  struct SharedFileAt {
    std::shared_ptr<const storage::MemoryBackend::SharedFile> file;
    uint64_t offset = 0;
  };
  struct RankState {
    std::optional<v1::LoadRequest> request;
    std::string session_id;
    std::vector<size_t> groups;  // the groups with deliveries for this rank, in order
    // Groups whose only deliveries to this rank are the daemon's own copies
    // to its GPU: never handed to it, but its load ends after they land.
    std::vector<size_t> device_groups;
    size_t next = 0;  // index into groups of the one to hand out next
    // Handed out, not released, oldest first, with when (delivery time):
    // one, or two while the first holds no room (LoadBatch.roomless).
    std::deque<std::pair<size_t, absl::Time>> held;
    bool done = false;
    // Where the bytes delivered to it came from, once its last batch is
    // handed out (SourcesLocked), and of them what ckptd copied to its GPU.
    std::optional<std::vector<v1::LoadSource>> sources;
    uint64_t device_bytes = 0;
  };

  absl::Status Plan();  // run by the last rank to arrive, without mu_
  // A load whose ranks span hosts: the coordinator plans every host's part
  // at once (coordinator.h PlanSpanningLoad); pinned here, on this host's
  // storage root.
  // `check`: the memory-tier step this host verified before offering its
  // files (held_step_check.h).
  absl::StatusOr<v1::LoadAssignment> PlanAcrossHosts(v1::NodeLoadPlan& plan,
                                                     std::unique_ptr<storage::FileLock>* pin,
                                                     tier::HeldStepCheck* check);
  // Reads `targets` one by one after a batch failed verification in the
  // memory tier, each that fails again from storage.
  absl::Status ReadWithFallback(absl::Span<const storage::ChunkTarget> targets,
                                storage::ChunkReader& memory);
  // The spread part's peers are usable: every host a route names has an
  // address, and this host a peer channel.
  // Runs this host's part of the coordinator's rebuild of shares lost with
  // a host (erasure_transfer.h), before the load reads anything.
  absl::Status RebuildLostShares(const v1::LoadAssignment& assignment);
  absl::Status CheckPeers(const v1::LoadAssignment& assignment) const;
  // The token of group `group`'s transfer from `from` to `to` (coordinator.proto LoadPeers).
  peer::PeerToken TransferToken(uint32_t group, const std::string& from,
                                const std::string& to) const;
  // A spread group's traffic: sends what this host read to the hosts that
  // need it, then waits for what it receives and verifies every chunk.
  absl::Status ExchangeGroup(const Group& group, char* room,
                             std::vector<peer::ExpectedTransfer>& incoming);
  // The index in `chunks` (sorted by room_offset) of the one that starts at
  // or last before `room_offset`; none when none does.
  static std::optional<size_t> InPlaceChunkAt(const std::vector<InPlaceChunk>& chunks,
                                              uint64_t room_offset);
  // The offset in the memory space of delivery `d` (room-relative) when
  // all of it lies in one of `chunks` (sorted by room_offset).
  static std::optional<uint64_t> InPlaceChunkOf(const std::vector<InPlaceChunk>& chunks,
                                                const v1::Delivery& d);
  // Marks the groups that can be read in place and shares their files
  // (a load from this host's memory tier); `checked`: the files verified
  // before the plan (held_step_check.h), whose chunks are not verified
  // again unless the file changed since.
  void ShareMemoryFilesLocked(const std::string& dir,
                              const std::map<std::string, tier::FileStamp>& checked)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Verifies a group's chunks where they lie; false when one does not
  // verify (the group is then read through the pool).
  bool VerifyInPlace(const Group& group);
  // A reader task: reads the next group, then queues the next task.
  void ReadNextGroup();
  // Takes group `index`'s room (bytes from the pool, waiting for them).
  absl::Status TakeRoom(size_t index);
  // Reads (or verifies in place, unless `verified` already) group `index`,
  // exchanges it with peers and delivers it to GPUs; `in_place` gets the
  // bytes verified where they lie.
  absl::Status ReadGroup(size_t index, storage::ChunkReader& reader, bool verified,
                         uint64_t* in_place);
  absl::Status DeliverToDevices(const planning::LoadGroup& group, const char* room);
  // Every group in the rank's device_groups has been delivered, or the load
  // failed.
  bool DeviceCopiesLandedLocked(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(size_t group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With a rank's last batch: the tiers the load read from, and the
  // sources of the bytes delivered to the rank.
  void SetTiersLocked(int rank, v1::LoadBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The sources of the bytes delivered to `rank` (node.proto LoadSource),
  // once every group it copies from is read: counted once per rank, into
  // the host's too (delivered_).
  const std::vector<v1::LoadSource>& SourcesLocked(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where the chunk that delivery `d` (room-relative) of `group` copies
  // from came from: kind and host.
  std::pair<std::string, std::string> SourceOfLocked(const Group& group,
                                                     const v1::Delivery& d) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs and counts the lost hosts' files this host rebuilt from parity.
  void ReportRebuilt(const v1::ErasureRebuild& rebuild, int64_t step);
  // The load's end for the metrics and the log line; once.
  void ReportEndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeReadyRoomsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRankLocked(const RankSession& rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "load of job J step S", as SaveSession's: messages begin with it and
  // ": ".
  std::string Who() const;

  NodeContext& context_;
  const std::string job_;
  const int64_t step_;
  const int world_size_;
  const int local_world_size_;

  mutable absl::Mutex mu_;
  // Only the ranks that arrived: a world of 65536 with one rank present
  // must not cost 65536 rank states.
  std::map<int, RankState> ranks_ ABSL_GUARDED_BY(mu_);
  // This host's ranks that asked, until the plan deadline.
  planning::RankBarrier asked_ ABSL_GUARDED_BY(mu_);
  int done_ranks_ ABSL_GUARDED_BY(mu_) = 0;
  bool planned_ ABSL_GUARDED_BY(mu_) = false;
  bool planning_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // The local ranks that have not asked and have no session here.
  AbsentRanks absent_ ABSL_GUARDED_BY(mu_);
  std::string load_id_ ABSL_GUARDED_BY(mu_);
  v1::LoadAssignment assignment_ ABSL_GUARDED_BY(mu_);
  // A load spread over hosts: the hosts by name, in token order (their
  // index in the sorted names), and this load's senders' hold on the peer
  // receiver (see PeerReceiver::OpenPrefix) while it runs.
  std::map<std::string, uint16_t> peer_index_;  // set with assignment_, then read-only
  v1::LoadPeers peers_;                         // the same
  std::shared_ptr<void> peer_prefix_ ABSL_GUARDED_BY(mu_);
  // The same prefix, opened before a rebuild from parity and held until
  // peer_prefix_ is: a sender waiting for it in between would be refused.
  std::shared_ptr<void> early_prefix_ ABSL_GUARDED_BY(mu_);
  // The step's pin (coordinator/retention.h): gc keeps the step until every
  // rank is done or the session is gone.
  std::unique_ptr<storage::FileLock> pin_ ABSL_GUARDED_BY(mu_);
  // Where chunks are read: storage, or the memory tier (set when planned,
  // then read-only). Chunks that fail verification in memory are read at
  // the same file and offset from storage, when it has the step.
  storage::Backend* read_backend_ = nullptr;
  bool from_memory_ = false;
  std::atomic<uint64_t> fallback_chunks_{0};
  // The chunks read from storage after failing verification in memory.
  std::set<const v1::StoredChunk*> fallen_back_ ABSL_GUARDED_BY(mu_);
  // A load from the memory tier that rebuilt a lost host's files from
  // parity first: each such file, with the host that rebuilt (and holds)
  // it. Set with assignment_, then read-only.
  std::map<std::string, std::string> rebuilt_by_;
  // Bytes delivered to this host's ranks, by source (kind, host): the sum
  // of SourcesLocked's, for the load's log line and metrics.
  std::map<std::pair<std::string, std::string>, uint64_t> delivered_ ABSL_GUARDED_BY(mu_);
  // The files shared with the ranks, by name (until every rank is done),
  // and the size of the memory space they are laid out in.
  std::map<std::string, SharedFileAt> memory_files_ ABSL_GUARDED_BY(mu_);
  uint64_t memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> used_durable_{false};
  std::vector<std::vector<uint64_t>> object_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<Group> groups_ ABSL_GUARDED_BY(mu_);
  size_t next_to_read_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_to_allocate_ ABSL_GUARDED_BY(mu_) = 0;  // rooms go in group order
  int readers_running_ ABSL_GUARDED_BY(mu_) = 0;      // reader tasks queued or running
  std::atomic<bool> failed_{false};
  // Where the time went, for the line a finished load logs and its stage
  // metrics (nanoseconds, summed over the reader threads; deliver also over
  // the ranks' hold of their batches).
  struct ReaderTimes {
    std::atomic<int64_t> room_wait{0}, io{0}, verify{0}, deliver{0};
  } times_;
  absl::Time created_at_ ABSL_GUARDED_BY(mu_);
  absl::Time planned_at_ ABSL_GUARDED_BY(mu_);
  bool reported_ ABSL_GUARDED_BY(mu_) = false;
  prometheus::Counter& read_metric_;  // the job's ckpt_read_bytes_total
  std::atomic<uint64_t> bytes_read_{0};
  uint64_t bytes_to_read_ ABSL_GUARDED_BY(mu_) = 0;  // set when planned
};

}  // namespace ckpt::session

#endif  // CKPT_DAEMON_SESSION_LOAD_SESSION_H_
