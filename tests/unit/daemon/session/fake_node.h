// A node for driving SaveSession and LoadSession directly, without gRPC,
// sockets or rank processes: a NodeContext over in-memory parts. Storage
// is a MemoryBackend behind the fault-injection decorator (so a test can
// fail writes or corrupt reads), the GPU the host runtime (or a test's
// fake), the pool a
// small real one, and the writers, readers, coordinator and catalog are
// the daemon's own. A test plays the ranks: it attaches them, calls the
// session's methods from one thread per rank, and copies bytes into and
// out of the pool as a rank's client library would.
//
// Thread-safety: the NodeContext's parts are; the helpers below are safe
// from any thread.
#ifndef CKPT_TESTS_UNIT_DAEMON_SESSION_FAKE_NODE_H_
#define CKPT_TESTS_UNIT_DAEMON_SESSION_FAKE_NODE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/auth/caller.h"
#include "daemon/auth/job_owners.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/exec/reader_pool.h"
#include "daemon/exec/writer_pool.h"
#include "daemon/metrics/metrics.h"
#include "daemon/pool/shm_pool.h"
#include "daemon/session/daemon_options.h"
#include "daemon/session/load_session.h"
#include "daemon/session/node_context.h"
#include "daemon/session/rank_sessions.h"
#include "daemon/session/save_session.h"
#include "daemon/storage/fault_injection.h"
#include "daemon/storage/memory/memory_backend.h"
#include "gpu/ipc_mapping_cache.h"

namespace ckpt::session::testing {

// One rank's state to save: its shards (flat regions of 1-D uint8 tensors
// for simplicity of the bytes) and objects, with their bytes.
struct RankState {
  v1::PlanSaveRequest request;            // shards and objects described
  std::vector<std::string> shard_bytes;   // parallel to request.shards()
  std::vector<std::string> object_bytes;  // parallel to request.objects()
};

class FakeNode {
 public:
  // A pool of `pool_bytes` and chunks of `chunk_bytes`; the plan and
  // snapshot deadlines are long: tests end barriers by events, not time.
  // `gpu` stands in for the GPU (a fake behind DeviceRuntime's interface);
  // null: the host runtime, which has none.
  explicit FakeNode(uint64_t pool_bytes = 8 << 20, uint64_t chunk_bytes = 64 << 10,
                    std::unique_ptr<gpu::DeviceRuntime> gpu = nullptr);
  ~FakeNode();

  NodeContext& context() { return *context_; }
  storage::FaultInjectionBackend& storage() { return faults_; }
  pool::ShmPool& pool() { return *pool_; }
  coordinator::Coordinator& coordinator() { return *coordinator_; }
  const DaemonOptions& options() const { return options_; }

  // Attaches rank `rank` of a job of `world` ranks, all on this host.
  RankSession Attach(const std::string& job, int rank, int world);

  // Plays one rank's save through `save`: plans (blocking at the barrier),
  // copies every batch into the pool and submits it. The save's error, or
  // the rank's, as the session returns it.
  absl::Status SaveRank(SaveSession& save, const RankSession& rank, const RankState& state);
  // Plays one rank's load of `request` through `load`, copying deliveries
  // into `out` (one buffer per tensor, sized by the caller) and objects
  // into `objects`.
  absl::Status LoadRank(LoadSession& load, const RankSession& rank, const v1::LoadRequest& request,
                        std::vector<std::string>* out, std::vector<std::string>* objects);

 private:
  DaemonOptions options_;
  storage::MemoryBackend memory_;
  storage::FaultInjectionBackend faults_{&memory_};
  std::unique_ptr<gpu::DeviceRuntime> gpu_;
  std::unique_ptr<gpu::IpcMappingCache> ipc_;
  std::unique_ptr<pool::ShmPool> pool_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<exec::WriterPool> writers_;
  std::unique_ptr<exec::ReaderPool> readers_;
  std::unique_ptr<RankSessions> sessions_;
  std::unique_ptr<auth::Authenticator> auth_;
  std::unique_ptr<auth::JobOwners> owners_;
  std::unique_ptr<metrics::Metrics> metrics_;
  std::atomic<uint64_t> bytes_written_{0}, bytes_read_{0}, commits_{0};
  std::unique_ptr<NodeContext> context_;
};

// A rank's part of a 1-D uint8 tensor `fqn` of `global` bytes: bytes
// [begin, begin + length), filled from `seed`.
void AddShard(RankState& state, const std::string& fqn, int64_t global, int64_t begin,
              int64_t length, uint32_t seed);
void AddObject(RankState& state, const std::string& key, const std::string& bytes);
// The bytes AddShard gives byte `at` of tensor `fqn`'s global range.
uint8_t PatternByte(uint32_t seed, int64_t at);
// A load request for [begin, begin + length) of 1-D tensor `fqn`.
void AddLoadShard(v1::LoadRequest& request, const std::string& fqn, int64_t global, int64_t begin,
                  int64_t length);

}  // namespace ckpt::session::testing

#endif  // CKPT_TESTS_UNIT_DAEMON_SESSION_FAKE_NODE_H_
