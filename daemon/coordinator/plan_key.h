// The key the save plan cache compares plans by: a SHA-256 digest of every
// field of the hosts' plans but the step and the user metadata, each
// integer as a varint and each string and list behind its length, so the
// encoding is unambiguous. A cluster's plan is millions of shards: its
// encoding kept whole was a gigabyte (5 s to fault in at 8 million
// shards); the digest is 32 bytes, and SHA-256 collisions are found
// neither by chance nor by construction, so equal digests are equal plans
// (the reason a weaker, faster hash is not used).
//
// PlanKeyWriter takes the plans piece by piece in the order PlanKey walks
// them, so that a planner already walking them (save_planner.h) digests
// them on the way instead of in a second walk.
//
// Thread-safety: PlanKey is a pure function; a writer is one thread's.
#ifndef CKPT_DAEMON_COORDINATOR_PLAN_KEY_H_
#define CKPT_DAEMON_COORDINATOR_PLAN_KEY_H_

#include <openssl/types.h>

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ckpt/v1/coordinator.pb.h"

namespace ckpt::coordinator {

// The plans' key. Equal plans give equal keys; different plans, different
// keys. Empty if OpenSSL failed (out of memory): such a key is never
// looked up.
std::string PlanKey(absl::Span<const v1::NodeSavePlan> nodes);

// For each host in order: Node, then for each of its ranks in order: Rank,
// Shard for each of its shards in order, Objects. Then Finish gives what
// PlanKey gives.
class PlanKeyWriter {
 public:
  PlanKeyWriter();
  ~PlanKeyWriter();
  PlanKeyWriter(const PlanKeyWriter&) = delete;
  PlanKeyWriter& operator=(const PlanKeyWriter&) = delete;

  void Node(const v1::NodeSavePlan& node);  // its fields but its ranks
  void Rank(const v1::RankSavePlan& rank);  // its number and shard count
  void Shard(const v1::TensorShard& shard);
  void Objects(const v1::RankSavePlan& rank);
  std::string Finish();

 private:
  static constexpr size_t kMaxVarint = 10;
  void Int(int64_t v);
  void Text(absl::string_view text);
  void Ints(const google::protobuf::RepeatedField<int64_t>& values);
  void Bytes(const void* data, size_t size);
  void Flush();
  void Digest(const void* data, size_t size);

  EVP_MD_CTX* digest_ = nullptr;
  bool failed_ = false;
  // Fields gather here and are digested a buffer at a time.
  unsigned char stage_[16384];
  size_t staged_ = 0;
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_PLAN_KEY_H_
