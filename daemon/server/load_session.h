// One load of one job step on this host (DESIGN.md §5). Ranks arrive with
// their requests; the last to arrive batches them into one NodeLoadPlan,
// gets the chunk reads from the coordinator, gives every rank a lease and
// runs the reads on reader threads: each needed chunk is read once into
// scratch pool memory, checked, and scattered into every lease that wants
// some of it. Then all ranks are answered together.
//
// Thread-safety: all public methods are safe from any thread.
#ifndef CKPT_DAEMON_SERVER_LOAD_SESSION_H_
#define CKPT_DAEMON_SERVER_LOAD_SESSION_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/server/save_session.h"

namespace ckpt::server {

class LoadSession {
 public:
  LoadSession(NodeContext& context, std::string job, int64_t step, int world_size);

  // Blocks until every rank has asked and the data is in the leases.
  absl::StatusOr<v1::LoadResponse> Load(const RankSession& rank, const v1::LoadRequest& request);
  void CheckDeadlines(absl::Time now);
  bool finished() const;

 private:
  struct RankState {
    std::optional<v1::LoadRequest> request;
    std::string session_id;
    v1::LoadResponse response;
  };

  absl::Status Execute();  // run by the last rank to arrive, without mu_
  absl::Status RunReads(const v1::LoadAssignment& assignment,
                        const std::vector<char*>& lease_base,
                        const std::vector<std::vector<uint64_t>>& tensor_offset,
                        const std::vector<std::vector<uint64_t>>& object_offset);

  // Copies the requests that name a GPU buffer from the leases to the
  // ranks' devices (CUDA IPC pull).
  absl::Status DeliverToDevices(const v1::NodeLoadPlan& plan,
                                const std::vector<std::string>& session_ids,
                                const std::vector<char*>& lease_base,
                                const std::vector<std::vector<uint64_t>>& tensor_offset);

  NodeContext& context_;
  const std::string job_;
  const int64_t step_;
  const int world_size_;

  mutable absl::Mutex mu_;
  std::vector<RankState> ranks_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_LOAD_SESSION_H_
