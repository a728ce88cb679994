// The memory tier (docs/design.md §8): checkpoints kept in this daemon's memory,
// so a trainer that crashed restarts from them without reading storage.
//
// It is a second store beside the durable one, with the same parts: a
// memory backend (daemon/storage/memory) holding the step directories under
// kRoot, and a coordinator over it that plans, commits (the same protocol,
// the same MANIFEST with a CRC32C per chunk) and lists them. So a save or a
// load picks its store and runs unchanged. What is particular to memory:
//
//  - A budget (--memory_tier_bytes), separate from the staging pool. The
//    backend refuses any write past it; before a save is written, the tier
//    makes room by dropping older steps (never a job's newest committed
//    step, never one being read or persisted), and refuses the save, naming
//    the budget, when that is not enough.
//  - Retention: the newest keep_steps committed steps of each job are kept
//    (with the one being written, at least two versions); older ones go as
//    each step commits.
//  - Persistence: a step saved to memory and durable storage is copied,
//    file by file and byte for byte, to the durable store in the background
//    and committed there with the same manifest (no second snapshot). So a
//    chunk that fails verification in memory can be read at the same file
//    and offset from storage. A step of a job spread over hosts is copied
//    by every host of it, each its own files, into one directory the
//    cluster's coordinator names and commits (spread_persist.h).
//
// The tier lives and dies with the daemon: it survives the trainer, not
// ckptd.
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_TIER_MEMORY_TIER_H_
#define CKPT_DAEMON_TIER_MEMORY_TIER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/storage/memory/memory_backend.h"

namespace ckpt::tier {

struct MemoryTierOptions {
  uint64_t budget_bytes = 0;  // must be positive
  // Committed steps kept per job, newest first (a step being written is
  // held besides them).
  int keep_steps = 1;
};

// Persistence outcomes, for status and metrics.
struct PersistCounts {
  uint64_t persisted = 0;
  uint64_t failed = 0;
  uint64_t queued = 0;  // waiting or running now
};

class MemoryTier {
 public:
  static constexpr char kRoot[] = "/memory";
  // The memory store's blocks: small enough that a step's small files (its
  // MANIFEST, LATEST) and each data file's tail waste little of the budget,
  // large enough that a chunk is a few copies.
  static constexpr uint64_t kBlockBytes = 64 << 10;

  // `durable` is where persisted steps go. The coordinator options are the
  // durable coordinator's: the memory tier plans and checks as it does.
  MemoryTier(MemoryTierOptions options, planning::SavePlannerOptions planner,
             coordinator::CatalogOptions catalog, coordinator::RendezvousOptions rendezvous,
             coordinator::Coordinator& durable);
  ~MemoryTier();  // waits for the persistence running now; drops the queued ones

  coordinator::Coordinator& coordinator() { return *coordinator_; }
  storage::MemoryBackend& backend() { return *backend_; }
  uint64_t budget_bytes() const { return options_.budget_bytes; }
  uint64_t bytes_held() const { return backend_->bytes_held(); }

  // Room in the budget held for one save from its plan to its end (commit
  // or failure): admissions are counted one at a time, so two saves are
  // never admitted into room for one.
  class Room {
   public:
    Room(MemoryTier& tier, uint64_t bytes) : tier_(tier), bytes_(bytes) {}
    ~Room();
    Room(const Room&) = delete;
    Room& operator=(const Room&) = delete;

   private:
    MemoryTier& tier_;
    const uint64_t bytes_;
  };

  // What a save holds in the tier: its data files (the ends of each
  // writer's items) and its commit's files (MANIFEST of about
  // `manifest_bytes`, LATEST and its temporary and intent files), each in
  // whole blocks of the store.
  uint64_t SaveBytes(const v1::HostAssignment& host, uint64_t manifest_bytes) const;

  // Room for `bytes` more, for a save of `job`: what committed steps hold,
  // plus the room of saves admitted before, must leave it. Drops older
  // steps of that job, then of the others, until it fits (each job keeps
  // its newest committed step; pinned ones stay). RESOURCE_EXHAUSTED naming
  // the budget, the bytes held and the flag when it cannot.
  absl::StatusOr<std::unique_ptr<Room>> Reserve(const std::string& job, uint64_t bytes);

  // Queues the persistence of a committed memory step to storage; it runs
  // on the tier's own thread, one step at a time, in order. The step is
  // pinned here, before the caller's commit returns: retention and the
  // budget never drop a step waiting to be persisted. `hold` (the save's
  // disk reservation, disk_reservations.h) is kept until the persistence
  // ends, committed or failed, or is dropped with the tier.
  void PersistLater(const std::string& job, int64_t step, std::shared_ptr<void> hold = nullptr);
  // Copies the step's files to the durable store and commits it there with
  // the same manifest; ALREADY_EXISTS when storage has the step. Runs in
  // the caller (PersistLater's thread, tests). A step spread over hosts
  // (its manifest names more than one): this host's part, below.
  absl::Status Persist(const std::string& job, int64_t step);

  // How this host takes part in the durable copy of a step spread over
  // hosts (spread_persist.h): the cluster coordinator's
  // SpreadPersistService, over gRPC or in this process. Set once, before
  // serving, on a daemon in a cluster; without it such a step's
  // persistence fails, saying why.
  struct SpreadPersistence {
    std::string host;  // this host's name, as its data files are named
    std::function<absl::StatusOr<v1::SpreadPersistDir>(const v1::SpreadPersistOpen&)> open;
    std::function<absl::StatusOr<v1::SpreadPersistResult>(const v1::SpreadPersistCopied&)> report;
  };
  void PersistSpreadWith(SpreadPersistence spread);
  PersistCounts persist_counts() const;
  // Blocks until no persistence is queued or running (tests, shutdown).
  void WaitPersisted();

  // Tests of verification (fault_points.h CorruptionPoint): flips one byte
  // in the middle of the step's first chunk held here (the first of a file
  // named `prefer`... when there is one), in place.
  absl::Status FlipByte(const std::string& job, int64_t step, const std::string& prefer = "");

  // Per job: the committed steps in memory and the bytes they hold.
  std::vector<v1::MemoryTierJob> Jobs();

  // The job's committed steps here, each with the data files held of it
  // ("data/<host>-<writer>.bin": this host's and its replicas), less the
  // files set aside.
  std::vector<std::pair<int64_t, std::vector<std::string>>> HeldSteps(const std::string& job);
  // A file of a committed step whose bytes failed verification here: loads
  // spread over hosts plan around it (HeldSteps leaves it out) and take it
  // from another host's copy, parity or storage. Forgotten with the step;
  // at most kMaxSetAside at once (past that a load's own check still
  // catches the bytes).
  static constexpr size_t kMaxSetAside = 65536;
  // False when kMaxSetAside files are set aside already.
  bool SetAside(const std::string& job, int64_t step, const std::string& file);
  // A step committed here anew (its number may have been used before)
  // starts with nothing set aside.
  void ForgetSetAside(const std::string& job, int64_t step);
  // Changes whenever a step spread over hosts is committed here or files
  // rebuilt from parity are adopted; kChanging while that happens. A check
  // of held bytes made under another value, or under kChanging, may not be
  // of what is held now.
  static constexpr uint64_t kChanging = ~uint64_t{0};
  uint64_t Generation() const {
    if (changing_.load(std::memory_order_acquire) > 0) return kChanging;
    return generation_.load(std::memory_order_acquire);
  }

  // A save spread over hosts committed at the cluster's coordinator: this
  // host commits `manifest` in its own memory over the files it wrote and
  // received into `partial_dir` (relative to kRoot), which it then removes.
  // The step's path here.
  // `protection`: how the job's step is kept on other hosts (status shows
  // it: copies and erasure of MemoryTierJob).
  absl::StatusOr<std::string> CommitHere(const v1::CheckpointManifest& manifest,
                                         const std::string& partial_dir,
                                         const v1::MemoryTierJob& protection);

  // A directory for shares rebuilt from parity before a load (created,
  // with data/); a partial directory, so a restart would remove it.
  absl::StatusOr<std::string> NewScratchDir(const std::string& job, int64_t step);
  // Makes the files rebuilt into `dir` part of the manifest's step here:
  // moved into it when this host has the step, else the step is committed
  // here with them. `dir` is removed either way.
  absl::Status AdoptRebuilt(const v1::CheckpointManifest& manifest, const std::string& dir);

 private:
  void RunPersists();
  // Moves the data files rebuilt into `dir` into the step's directory
  // here, where it lacks them or set them aside.
  absl::Status AdoptInto(const std::string& job, int64_t step, const std::string& dir,
                         const std::string& step_dir);
  // Moves the data/ and parity/ files of directory `from` into `to`.
  absl::Status MoveFiles(const std::string& from, const std::string& to);
  // Bytes held now by steps being written (partial directories): counted in
  // their saves' rooms, not twice.
  uint64_t BytesBeingWritten() const;
  // Bytes of the blocks of the files under `dir`, recursively.
  uint64_t BytesUnder(const std::string& dir) const;
  uint64_t UsedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(room_mu_);

  const MemoryTierOptions options_;
  // The files set aside, per job and step, and how many in all.
  absl::Mutex set_aside_mu_;
  std::map<std::pair<std::string, int64_t>, std::set<std::string>> set_aside_
      ABSL_GUARDED_BY(set_aside_mu_);
  size_t set_aside_files_ ABSL_GUARDED_BY(set_aside_mu_) = 0;
  // Generation(): a change counts up before and after, so a value read
  // while none runs differs from every value read before or during one.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> changing_{0};
  struct FilesChanging {
    explicit FilesChanging(MemoryTier& tier) : tier(tier) {
      tier.changing_.fetch_add(1, std::memory_order_acq_rel);
      tier.generation_.fetch_add(1, std::memory_order_acq_rel);
    }
    ~FilesChanging() {
      tier.generation_.fetch_add(1, std::memory_order_acq_rel);
      tier.changing_.fetch_sub(1, std::memory_order_acq_rel);
    }
    FilesChanging(const FilesChanging&) = delete;
    FilesChanging& operator=(const FilesChanging&) = delete;
    MemoryTier& tier;
  };
  // Per job, the copies of its newest step committed by CommitHere (a job
  // on this host alone has one).
  absl::Mutex copies_mu_;
  std::map<std::string, v1::MemoryTierJob> copies_ ABSL_GUARDED_BY(copies_mu_);
  std::unique_ptr<storage::MemoryBackend> backend_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  coordinator::Coordinator& durable_;

  // Admissions, one at a time, and the room they hold.
  mutable absl::Mutex room_mu_;
  uint64_t reserved_ ABSL_GUARDED_BY(room_mu_) = 0;

  mutable absl::Mutex mu_;
  struct Queued {
    std::string job;
    int64_t step = 0;
    std::unique_ptr<storage::FileLock> pin;
    std::shared_ptr<void> hold;
  };
  std::deque<Queued> persists_ ABSL_GUARDED_BY(mu_);
  bool persisting_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t persisted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t persist_failed_ ABSL_GUARDED_BY(mu_) = 0;
  SpreadPersistence spread_ ABSL_GUARDED_BY(mu_);
  std::thread persister_;  // last: started once the rest exists
};

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_MEMORY_TIER_H_
