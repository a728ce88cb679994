// The ckpt client: what a training rank links.
//
//   auto client = ckpt::Client::Attach({.socket_path = ..., .job = "llama",
//                                       .rank = r, .world_size = n});
//   auto handle = (*client)->Save(step, tensors, objects);   // returns at once
//   ... compute ...
//   (*handle)->WaitSnapshot();   // before the optimizer step modifies tensors
//   (*handle)->WaitPersisted();  // only when durability matters now
//   (*client)->Load(ckpt::kLatestStep, tensors, objects);   // any sharding
//
// Every rank of the job must call Save (or Load) for the same step: the
// daemon plans across all of them. Errors, including those of background
// work, come back as absl::Status with what failed and where.
//
// Saves run in order on one background worker per client (a job saving
// every step keeps a flat thread count). Every call to the daemon has a
// deadline; a dead daemon fails what is in flight instead of hanging it,
// and the next Save or Load attaches again to a restarted one.
//
// Thread-safety: a Client may be used from several threads; a SaveHandle too.
#ifndef CKPT_CLIENT_INCLUDE_CKPT_CLIENT_H_
#define CKPT_CLIENT_INCLUDE_CKPT_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/types.h"

namespace ckpt {

struct ClientOptions {
  std::string socket_path = "/run/ckptd/ckptd.sock";
  std::string job;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  // Ranks of the job on this host; 0: all of them (the job is on one host).
  // A job spread over hosts names how many attach to each daemon, whose
  // --coordinator_address then meets the hosts' plans.
  int local_world_size = 0;
  int copy_threads = 4;  // threads that copy host tensors into the pool
  // Bytes copied before they are handed to the daemon's writers, so writing
  // overlaps copying (rounded to whole chunks).
  uint64_t pipeline_bytes = 32 << 20;
  // How GPU tensors travel. kPull: the daemon maps them over CUDA IPC and
  // copies on its own streams (nothing runs in the trainer). kPush: this
  // process copies them through the pool, for containers without IPC.
  enum class GpuTransfer { kPull, kPush };
  GpuTransfer gpu_transfer = GpuTransfer::kPull;
};

// Where a save's step goes (docs/design.md §8). kMemory: the daemon's memory
// tier (ckptd --memory_tier_bytes), committed once in place; it survives
// this process, not the daemon. kMemoryAndDurable: committed in memory, then
// persisted to storage from that copy in the background; WaitPersisted
// returns at the memory commit.
enum class Tier { kDurable, kMemory, kMemoryAndDurable };

// The common policy: every step to memory, every `durable_every`-th step
// to storage as well (0: never).
inline Tier TierForStep(int64_t step, int64_t durable_every) {
  return durable_every > 0 && step % durable_every == 0 ? Tier::kMemoryAndDurable : Tier::kMemory;
}

struct SaveOptions {
  Tier tier = Tier::kDurable;
  bool partial = false;   // allow tensors this save does not cover fully
  bool blocking = false;  // Save returns only once the snapshot is taken
  // The CUDA stream (a cudaStream_t) whose queued work writes the GPU
  // tensors: the snapshot is taken only after the work queued on it before
  // Save. nullptr: the default stream.
  void* cuda_stream = nullptr;
  std::map<std::string, std::string> user_metadata;
  // How ckptd's writers store the chunks: "none", "zstd" or "grouped-zstd"
  // (docs/compression.md); empty: the daemon's --codec. Every rank on a
  // host must pass the same.
  std::string codec;
  // Step deltas on durable storage (docs/compression.md): a full step every
  // delta_every saves, the others stored as deltas against it; 1: every
  // step full; 0: the daemon's --delta_every.
  int delta_every = 0;
};

struct LoadOptions {
  // kAny: the fastest tier that has the step (for kLatestStep, the newest
  // step in any tier).
  enum class From { kAny, kMemory, kDurable };
  From from = From::kAny;
};

// Bytes of a load from one source: kind "memory" (the host's memory tier),
// "storage" (read from storage by the host), "peer" (sent by `host`, another
// host of a load spread over hosts) or "parity" (rebuilt from parity by
// `host` for this load); host: the host that read or rebuilt them.
struct LoadSource {
  std::string kind;
  std::string host;
  uint64_t bytes = 0;
};

struct LoadResult {
  int64_t step = 0;
  // The tiers the bytes came from ("memory", "durable"), and the chunks
  // read from storage after failing verification in memory.
  std::vector<std::string> tiers;
  uint64_t fallback_chunks = 0;
  // The bytes delivered into this rank's tensors and objects (counted as
  // they are copied), and where they came from: the sources add up to it.
  uint64_t bytes = 0;
  std::vector<LoadSource> sources;
};

// What a checkpoint holds, as its manifest lists it: enough to shape the
// tensors and objects a load asks for (torch.distributed.checkpoint's reader
// builds its metadata from it).
struct CheckpointContents {
  struct Tensor {
    std::string fqn;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> global_shape;
    bool partial = false;  // the save did not cover all of it
  };
  struct Object {
    std::string key;
    int rank = -1;  // -1: the job's (global); else the rank that saved it
  };
  int64_t step = 0;
  std::vector<Tensor> tensors;
  std::vector<Object> objects;
};

class SaveHandle {
 public:
  virtual ~SaveHandle() = default;
  virtual int64_t step() const = 0;
  // Returns once this rank's tensors are copied out: they may change now.
  virtual absl::Status WaitSnapshot() = 0;
  // Returns once the checkpoint is committed (or the save failed).
  virtual absl::Status WaitPersisted() = 0;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Attach(const ClientOptions& options);
  virtual ~Client() = default;

  // Starts a save of the tensors' current contents. The tensors' memory must
  // stay valid and unchanged until WaitSnapshot() returns.
  virtual absl::StatusOr<std::shared_ptr<SaveHandle>> Save(int64_t step,
                                                           std::vector<HostTensor> tensors,
                                                           std::vector<SaveObject> objects,
                                                           SaveOptions options = {}) = 0;
  // Fills each tensor's region (any sharding) and each object from the given
  // step, or the latest one with kLatestStep. Returns the step loaded.
  absl::StatusOr<int64_t> Load(int64_t step, const std::vector<HostTensor>& tensors,
                               const std::vector<LoadObject>& objects = {}) {
    absl::StatusOr<LoadResult> result = Load(step, tensors, objects, LoadOptions{});
    if (!result.ok()) return result.status();
    return result->step;
  }
  // The same, choosing the tier, and saying where the bytes came from.
  virtual absl::StatusOr<LoadResult> Load(int64_t step, const std::vector<HostTensor>& tensors,
                                          const std::vector<LoadObject>& objects,
                                          const LoadOptions& options) = 0;
  // What the given step (or the latest, with kLatestStep) holds. Needs no
  // other rank: it reads the manifest, not the data.
  virtual absl::StatusOr<CheckpointContents> Describe(int64_t step) = 0;
};

}  // namespace ckpt

#endif  // CKPT_CLIENT_INCLUDE_CKPT_CLIENT_H_
