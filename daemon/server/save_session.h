// One save of one job step on this host, from the first rank's PlanSave to
// commit or abort (DESIGN.md §4):
//
//   planning   ranks arrive with their local plans; the last one to arrive
//              batches them into one NodeSavePlan, asks the coordinator for
//              the assignment, takes each rank's lease from the pool (waiting
//              for room: stall) and opens the data files.
//   snapshot   each rank copies its assigned items into its lease and
//              submits references to them; their chunks are queued to the
//              writers at once, so writing overlaps the other ranks' copies.
//   committing every chunk written and every rank snapshotted: files are
//              fsynced, checksums reported, the coordinator commits.
//   done / failed
//
// Any error, a timeout (rank died) or a cancel fails the whole save: every
// rank's WaitSave reports it, the partial directory is removed, leases are
// returned. The previous checkpoint is untouched.
//
// Thread-safety: all public methods are safe from any thread.
#ifndef CKPT_DAEMON_SERVER_SAVE_SESSION_H_
#define CKPT_DAEMON_SERVER_SAVE_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
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
#include "daemon/coordinator/coordinator.h"
#include "daemon/gpu/device_runtime.h"
#include "daemon/gpu/ipc_mapping_cache.h"
#include "daemon/pool/shm_pool.h"
#include "daemon/server/daemon_options.h"
#include "daemon/server/rank_sessions.h"
#include "daemon/server/writer_pool.h"

namespace ckpt::server {

struct NodeContext {
  const DaemonOptions& options;
  gpu::DeviceRuntime& gpu;
  gpu::IpcMappingCache& ipc;  // ranks' GPU allocations, by session
  v1::HostIdentity host;
  coordinator::Coordinator& coordinator;
  storage::Backend& backend;
  pool::ShmPool& pool;
  WriterPool& writers;
  RankSessions& sessions;
  std::atomic<uint64_t>& bytes_written;
  std::atomic<uint64_t>& bytes_read;
  std::atomic<uint64_t>& commits;
};

class SaveSession : public ChunkSink, public std::enable_shared_from_this<SaveSession> {
 public:
  SaveSession(NodeContext& context, std::string job, int64_t step, int world_size);
  ~SaveSession() override;

  // Blocks until every rank has planned (or the save fails).
  absl::StatusOr<v1::PlanSaveResponse> Plan(const RankSession& rank,
                                            const v1::PlanSaveRequest& request);
  absl::Status SubmitSnapshot(const RankSession& rank, const v1::SubmitSnapshotRequest& request);
  // Blocks until committed (OK) or failed (the save's error).
  absl::StatusOr<v1::WaitSaveResponse> Wait();
  void Fail(const absl::Status& status);
  // Fails the save if a phase's deadline has passed.
  void CheckDeadlines(absl::Time now);

  bool finished() const;
  const std::string& job() const { return job_; }
  int64_t step() const { return step_; }
  int world_size() const { return world_size_; }
  std::string save_id() const;
  v1::SaveProgress Progress() const;

  // ChunkSink.
  storage::WritableFile* File(int index) override;
  bool Abandoned() override;
  void OnChunksWritten(absl::Span<const WrittenChunk> chunks, absl::Status status) override;

 private:
  enum class Phase { kPlanning, kSnapshot, kCommitting, kDone, kFailed };

  struct RankState {
    std::optional<v1::PlanSaveRequest> request;
    std::vector<v1::SaveItem> items;
    std::vector<const v1::WriteItem*> writes;  // parallel to items
    std::map<std::pair<int, uint32_t>, size_t> item_of;  // (kind, index) -> item
    std::vector<uint64_t> received;     // bytes of each item handed over so far
    std::vector<uint64_t> lease_start;  // where each item lies in the lease
    std::map<uint64_t, uint64_t> claimed;  // lease ranges taken by items
    pool::Allocation lease;
    bool has_lease = false;
    bool snapshotted = false;
  };

  void PlanAllRanks();  // run by the last rank to arrive, without mu_
  // Checks one piece against the rank's items and lease, and appends its
  // chunks' write tasks.
  // A GPU item the daemon copies itself (CUDA IPC pull), queued while the
  // lock is held and run after it is released.
  struct PullJob {
    v1::DeviceBuffer source;
    char* destination = nullptr;  // the item's place in the lease
    const v1::SaveItem* item = nullptr;
    const v1::WriteItem* write = nullptr;
  };
  absl::Status AcceptPiece(RankState& state, const v1::SnapshotRef& ref,
                           std::map<int, std::vector<WriteTask>>& tasks,
                           std::vector<PullJob>& pulls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies one pulled item device-to-host chunk by chunk, queueing each
  // chunk's write as it lands.
  absl::Status RunPull(const std::string& session, const PullJob& job);
  void Finish();   // commit; run without mu_ once all chunks are written
  void CleanUp();  // after failure, once nothing is in flight; without mu_
  void CleanUpIfDue();
  // Whether the caller must now run Finish() or CleanUp().
  bool ReadyToFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ReadyToCleanUpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static const char* PhaseName(Phase phase);

  NodeContext& context_;
  const std::string job_;
  const int64_t step_;
  const int world_size_;

  mutable absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kPlanning;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // planning or finishing outside mu_
  bool cleaned_ ABSL_GUARDED_BY(mu_) = false;       // clean-up claimed
  bool cleanup_done_ ABSL_GUARDED_BY(mu_) = false;  // leases freed, directory removed
  std::vector<RankState> ranks_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int snapshotted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pending_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_written_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
  v1::SaveAssignment assignment_ ABSL_GUARDED_BY(mu_);
  // Set by planning before any chunk is queued and closed only once none is
  // in flight, so writer threads read it without mu_.
  std::vector<std::unique_ptr<storage::WritableFile>> files_;
  std::vector<v1::ChunkChecksum> checksums_ ABSL_GUARDED_BY(mu_);
  std::string committed_path_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> abandoned_{false};
};

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_SAVE_SESSION_H_
