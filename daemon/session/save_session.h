// One save of one job step on this host, from the first rank's PlanSave to
// commit or abort (docs/design.md §4):
//
//   planning   ranks arrive with their local plans; the last one to arrive
//              batches them into one NodeSavePlan and asks the coordinator
//              for the assignment, then opens the data files.
//   snapshot   each rank asks for batches: the daemon lays the next slices
//              of the rank's items out in pool room it allocates (waiting
//              while the job's share of the pool is full: backpressure), the
//              rank copies them there and submits the batch, and its chunks
//              go to the writers at once. A batch's room returns to the pool
//              as soon as its last chunk is written, so a state of any size
//              streams through a bounded pool.
//   committing every chunk written and every rank snapshotted: files are
//              fsynced, checksums reported, the coordinator commits.
//   done / failed
//
// A job spread over hosts (its ranks attached with a local world size
// below the world size) waits here for this host's ranks only; the
// cluster's coordinator meets the hosts' plans and commits once every host
// has reported (cluster/coordinator_client.h).
//
// Any error, a rank that goes away before its snapshot completes, a timeout
// or a cancel fails the whole save: every rank's WaitSave reports it, the
// partial directory is removed, all pool room is returned. The previous
// checkpoint is untouched.
//
// Thread-safety: all public methods are safe from any thread.
#ifndef CKPT_DAEMON_SESSION_SAVE_SESSION_H_
#define CKPT_DAEMON_SESSION_SAVE_SESSION_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/codec/chunk_codec.h"
#include "daemon/exec/writer_pool.h"
#include "daemon/planning/node_save_plan.h"
#include "daemon/planning/rank_barrier.h"
#include "daemon/planning/save_batches.h"
#include "daemon/session/absent_ranks.h"
#include "daemon/session/delta_base.h"
#include "daemon/session/disk_reservations.h"
#include "daemon/session/node_context.h"

namespace ckpt::session {

class SaveSession : public exec::ChunkSink, public std::enable_shared_from_this<SaveSession> {
 public:
  // local_world_size: the job's ranks on this host (world_size when the job
  // is on this host alone).
  // tier: where the step goes; a memory tier requires context.memory_tier
  // (NodeService checks).
  SaveSession(NodeContext& context, std::string job, int64_t step, int world_size,
              int local_world_size, v1::SaveTier tier = v1::SAVE_TIER_DURABLE);
  ~SaveSession() override;

  // Blocks until every rank has planned (or the save fails). `request` has
  // passed ValidatePlanSaveRequest (NodeService checks it once, there).
  absl::StatusOr<v1::PlanSaveResponse> Plan(const RankSession& rank,
                                            const v1::PlanSaveRequest& request);
  // Room for the rank's next slices; waits while the job's pool share is full.
  absl::StatusOr<v1::SaveBatch> NextBatch(const RankSession& rank);
  absl::Status SubmitSnapshot(const RankSession& rank, const v1::SubmitSnapshotRequest& request);
  // Waits until committed (OK, done), failed (the save's error) or timeout
  // passes (OK, not done).
  absl::StatusOr<v1::WaitSaveResponse> Wait(absl::Duration timeout);
  void Fail(const absl::Status& status);
  // The rank's process or connection is gone: fails the save unless the
  // rank's snapshot was complete (the daemon owns those bytes).
  void RankGone(int rank);
  // Fails the save if a phase's deadline has passed, or while planning if
  // a rank it waits for has had no session here for --rank_grace_s.
  void CheckDeadlines(absl::Time now);

  bool finished() const;
  const std::string& job() const { return job_; }
  int64_t step() const { return step_; }
  int world_size() const { return world_size_; }
  bool spans_hosts() const { return local_world_size_ < world_size_; }
  std::string save_id() const;
  v1::SaveProgress Progress() const;

  // ChunkSink.
  storage::WritableFile* File(int index) override;
  bool Abandoned() override;
  void OnChunksWritten(absl::Span<const exec::WrittenChunk> chunks, absl::Status status) override;

 private:
  enum class Phase { kPlanning, kSnapshot, kCommitting, kDone, kFailed };

  // Pool room handed to a rank for one batch.
  struct Room {
    int rank = 0;
    pool::Allocation allocation;
    bool has_allocation = false;
    std::vector<planning::BatchSliceLayout> slices;
    bool last = false;
    bool submitted = false;
    uint64_t pending_chunks = 0;  // queued to the writers, not yet written
  };

  struct RankState {
    std::optional<v1::PlanSaveRequest> request;
    std::vector<v1::SaveItem> items;
    std::vector<const v1::WriteItem*> writes;  // parallel to items
    planning::BatchCursor cursor;
    int open_batches = 0;  // handed out, not yet submitted
    bool handed_last = false;
  };

  void PlanAllRanks();  // run by the last rank to arrive, without mu_
  // Points the task at its delta base, where this save has one there.
  void SetDeltaBaseLocked(exec::WriteTask& task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The save's disk bytes reserved against the job's quota (none without
  // one, or for a save to memory alone): RESOURCE_EXHAUSTED past it.
  absl::StatusOr<std::unique_ptr<DiskReservations::Reservation>> ReserveDisk(
      const v1::HostAssignment& host);
  // Every local rank's request, by rank; only once all have arrived.
  planning::RankRequests RequestsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The attached ranks of this host that have not passed `barrier` (planned
  // or snapshotted), at most 16, for a timeout's message.
  std::string MissingLocked(const planning::RankBarrier& barrier) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why CheckDeadlines fails the save at `now`; OK to go on.
  absl::Status DeadlineFailureLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Write tasks for the host-copied slices of a submitted room.
  std::map<int, std::vector<exec::WriteTask>> TasksFor(uint64_t batch_id, Room& room, bool pulled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies a room's pulled slices device-to-host, queueing each chunk's
  // write as it lands.
  absl::Status RunPulls(const RankSession& rank, uint64_t batch_id);
  absl::Status WaitReadyEvent(int rank) ABSL_LOCKS_EXCLUDED(mu_);
  void FreeRoomIfDoneLocked(uint64_t batch_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkSubmittedLocked(RankState& state, uint64_t batch_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRankLocked(const RankSession& rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish();  // commit; run without mu_ once all chunks are written
  // Finish here, or (a save spread over hosts, whose commit waits for the
  // other hosts) on a background thread.
  void StartFinish();
  // A memory-tier save spread over hosts: receives other hosts' replicas
  // in the background from its plan on; sends this host's and waits for
  // both before it reports (replica_transfer.h).
  void StartReceivingReplicas();
  absl::Status ExchangeReplicas();
  // Commits the coordinator's manifest in this host's memory tier.
  absl::Status CommitHere(const v1::CommitResult& result);
  void CleanUp();  // after failure, once nothing is in flight; without mu_
  void CleanUpIfDue();
  // Whether the caller must now run Finish() or CleanUp().
  bool ReadyToFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyToCleanUpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops what only a save in flight needs (the ranks' requests, the plan
  // and its manifest, the checksums) once it has committed or is cleaned
  // up: finished saves are kept a while for late WaitSave calls, and must
  // not keep their plans (up to 64 MiB a rank) with them.
  void ReleaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The save's end for the metrics and the log: once, at commit or at the
  // end of clean-up, before any WaitSave can see the outcome (so a rank
  // that saw it finds it in the metrics). Metrics never call back into a
  // session, so reporting under mu_ cannot deadlock.
  void ReportEndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Who() const;
  static const char* PhaseName(Phase phase);

  NodeContext& context_;
  const std::string job_;
  const int64_t step_;
  const int world_size_;
  const int local_world_size_;
  const v1::SaveTier tier_;
  // The store the step is written to and committed in: durable storage, or
  // the memory tier's.
  coordinator::Coordinator& store_;
  storage::Backend& store_backend_;
  // The embedded coordinator, or the cluster's for a job spread over hosts
  // (NodeService makes no such save on a daemon in no cluster).
  cluster::LocalCoordinatorClient local_coordinator_;
  cluster::CoordinatorClient* const coordinator_;
  const absl::Time created_ = absl::Now();  // for the rate and ETA in Progress

  mutable absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kPlanning;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;          // calls working outside mu_ on the save's memory
  bool cleaned_ ABSL_GUARDED_BY(mu_) = false;  // clean-up claimed
  bool cleanup_done_ ABSL_GUARDED_BY(mu_) = false;  // room freed, directory removed
  // By rank, for the ranks that have planned: a map, not a vector of the
  // world's size, so a world of 65536 with one rank present costs one entry
  // (a vector cost ~20 MB per save, and any rank could open saves at will).
  // Emptied when the save ends (ReleaseLocked).
  std::map<int, RankState> ranks_ ABSL_GUARDED_BY(mu_);
  // This host's ranks that sent their plans, until the plan deadline; and,
  // once planned, those whose snapshot is complete, until the snapshot
  // deadline.
  planning::RankBarrier planned_ ABSL_GUARDED_BY(mu_);
  std::optional<planning::RankBarrier> snapshots_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_stored_ ABSL_GUARDED_BY(mu_) = 0;  // of those, as stored (encoded)
  // How the writers store the chunks: the first rank's choice (or the
  // daemon's --codec), which every other rank must repeat.
  std::optional<codec::Codec> codec_ ABSL_GUARDED_BY(mu_);
  // A full step every delta_every_ (1: every step; the same rule as codec_),
  // and the base this save's deltas are against (null: none). The base is
  // set by planning before any chunk is queued and kept until the save
  // ends, so writer threads use what tasks point to without mu_.
  std::optional<int> delta_every_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const DeltaBase> delta_ ABSL_GUARDED_BY(mu_);
  v1::SaveAssignment assignment_ ABSL_GUARDED_BY(mu_);
  uint64_t next_batch_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Room> rooms_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> event_waited_ ABSL_GUARDED_BY(mu_);
  // Set by planning before any chunk is queued and closed only once none is
  // in flight, so writer threads read it without mu_.
  std::vector<std::unique_ptr<storage::WritableFile>> files_;
  std::vector<v1::ChunkChecksum> checksums_ ABSL_GUARDED_BY(mu_);
  // A memory-tier save's room in the tier's budget, until it ends.
  std::unique_ptr<tier::MemoryTier::Room> memory_room_ ABSL_GUARDED_BY(mu_);
  // Its bytes reserved against the job's disk quota: released when it
  // commits to storage or fails; a memory+durable save hands it to its
  // persistence, which writes the bytes to storage later.
  std::unique_ptr<DiskReservations::Reservation> disk_reservation_ ABSL_GUARDED_BY(mu_);
  // The local ranks that have not planned and have no session here.
  AbsentRanks absent_ ABSL_GUARDED_BY(mu_);
  std::string committed_path_ ABSL_GUARDED_BY(mu_);
  bool reported_ ABSL_GUARDED_BY(mu_) = false;  // the persist report was sent
  // The replicas other hosts send here, once received (or failed).
  std::optional<absl::Status> replicas_received_ ABSL_GUARDED_BY(mu_);
  // An erasure-coded save: senders of data shares to this host wait for it.
  std::shared_ptr<void> erasure_prefix_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> abandoned_{false};
  // When each stage ended, for metrics::SaveStages.
  struct StageTimes {
    absl::Time created, planned, snapshotted, written;
    absl::Duration fsync, commit, replicate;
  };
  StageTimes times_ ABSL_GUARDED_BY(mu_);
  prometheus::Counter& written_metric_;  // the job's ckpt_written_bytes_total
};

}  // namespace ckpt::session

#endif  // CKPT_DAEMON_SESSION_SAVE_SESSION_H_
