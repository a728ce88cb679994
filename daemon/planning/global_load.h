// A load's global plan as the load planner leaves it (load_planner.h):
// every stored chunk to read, once, in (file, offset) order, and the
// copies each rank makes from it, in the planner's own compact form: the
// runs of each distinct region asked for, and the ranks that asked for
// it. A cluster's plan as messages is one ChunkRead per chunk with a
// CopyRun per copy (7 GB at 131,072 ranks), and a load spread over hosts
// only ever sends each host its part (load_spread.h): the messages are
// made from this for the reads a host gets, when it asks.
//
// Thread-safety: const methods may be called from several threads at once.
#ifndef CKPT_DAEMON_PLANNING_GLOBAL_LOAD_H_
#define CKPT_DAEMON_PLANNING_GLOBAL_LOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/manifest.pb.h"

namespace ckpt::planning {

struct GlobalLoadAccess;

class GlobalLoad {
 public:
  // One copy from a chunk into a region asked for, before any rank: the
  // same for every rank that asked for the region.
  struct Run {
    uint32_t read = 0;  // the chunk it copies from: an index into the chunks as found
    uint64_t chunk_offset = 0;
    uint64_t dest_offset = 0;
    uint64_t length = 0;
    uint64_t count = 1;
    uint64_t chunk_stride = 0;
    uint64_t dest_stride = 0;
  };
  // A stored chunk to read, copied from the manifest (which the plan keeps).
  struct Chunk {
    uint32_t file = 0;  // index into files
    uint32_t crc32c = 0;
    uint64_t file_offset = 0;
    uint64_t shard_offset = 0;
    uint64_t length = 0;
    const std::string* fqn = nullptr;
    // An encoded chunk or a delta (proto/lib/stored_chunk.h), copied whole
    // into a read; null for a raw chunk.
    const v1::StoredChunk* encoded = nullptr;
  };
  // One rank's request of a region: the rank and the request's place in
  // its list.
  struct Asker {
    int rank = 0;
    uint32_t index = 0;
  };
  // A copy from a read: a run of a region, for each of the region's askers.
  struct Use {
    uint32_t region = 0;
    uint32_t run = 0;  // into runs
  };

  // The plan's small part: step, each rank's sizes, the object reads and,
  // where the caller sets them, checkpoint_path, from_memory and rebuild.
  v1::LoadAssignment& header() { return header_; }
  const v1::LoadAssignment& header() const { return header_; }

  // The chunks to read. ReadAt(k) is the k-th in (file, offset) order, as
  // an id the other accessors take; ids are in the order the planner found
  // the chunks, in which each one's copies and askers lie next to each
  // other: a pass over every read is faster by id than in file order.
  size_t reads() const { return order_.size(); }
  uint32_t ReadAt(size_t k) const { return order_[k]; }
  const Chunk& chunk(uint32_t id) const { return chunks_[id]; }
  absl::string_view file(uint32_t id) const { return files_[chunks_[id].file]; }
  // Every data file a read names, once.
  const std::vector<absl::string_view>& files() const { return files_; }

  // Calls fn(rank) for every rank read `id` is copied to, in the order of
  // its copies (a rank that gets several copies comes as often).
  template <typename Fn>
  void ForEachRank(uint32_t id, Fn&& fn) const {
    for (uint32_t u = first_use_[id]; u < first_use_[id + 1]; ++u) {
      const uint32_t region = uses_[u].region;
      for (uint32_t q = first_asker_[region]; q < first_asker_[region + 1]; ++q) {
        fn(askers_[q].rank);
      }
    }
  }

  // Adds read `id` to `out` with the copies to the ranks `keep` accepts
  // (a rank's copies and the ranks that get the same copy at the same
  // place of their lists, as one CopyRun with more_ranks).
  v1::ChunkRead* AddRead(uint32_t id, v1::LoadAssignment& out,
                         absl::FunctionRef<bool(int rank)> keep) const;
  // The whole plan as one message: the header and every read.
  void ToAssignment(v1::LoadAssignment& out) const;

  // Keeps what the reads point into (the manifest) as long as the plan.
  void KeepAlive(std::shared_ptr<const void> owner) { owner_ = std::move(owner); }

 private:
  friend struct GlobalLoadAccess;  // the load planner, which fills it

  // AddRead, with room made for every asker's rank when all are kept.
  v1::ChunkRead* AddReadOf(uint32_t r, v1::ChunkRead* read, absl::FunctionRef<bool(int rank)> keep,
                           bool all) const;

  v1::LoadAssignment header_;
  std::shared_ptr<const void> owner_;
  std::vector<Chunk> chunks_;             // in the order found
  std::vector<absl::string_view> files_;  // into the manifest
  std::vector<uint32_t> order_;           // (file, offset) order: indexes into chunks_
  std::vector<uint32_t> first_use_;       // by chunk: uses_[first_use_[r], first_use_[r + 1])
  std::vector<Use> uses_;
  std::vector<Run> runs_;
  std::vector<uint32_t> first_asker_;  // by region: askers_[...]
  std::vector<Asker> askers_;          // by region, in request order
};

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_GLOBAL_LOAD_H_
