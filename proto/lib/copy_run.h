// Applying a load plan's CopyRun (ckpt/v1/coordinator.proto): bounds check
// once, then copy every repetition. The strided form keeps plans small (one
// run per chunk for a column of a tall tensor); these are the only places
// that walk its repetitions.
//
// Thread-safety: pure functions.
#ifndef CKPT_PROTO_LIB_COPY_RUN_H_
#define CKPT_PROTO_LIB_COPY_RUN_H_

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "ckpt/v1/coordinator.pb.h"

namespace ckpt {

// Calls fn(rank) for every rank the run copies to: its rank, then
// more_ranks.
template <typename Fn>
void ForEachRunRank(const v1::CopyRun& run, Fn&& fn) {
  fn(run.rank());
  for (int rank : run.more_ranks()) fn(rank);
}

// Repetitions of the run: count 0 and 1 both mean one.
inline uint64_t CopyRunRepetitions(const v1::CopyRun& run) {
  return run.count() <= 1 ? 1 : run.count();
}

// Every repetition lies inside [0, chunk_length) of the chunk and
// [0, dest_length) of the destination, strides do not make repetitions
// overlap, and no offset wraps; INVALID_ARGUMENT naming the run otherwise.
// O(1): the last repetition is the farthest on both sides.
absl::Status CheckCopyRun(const v1::CopyRun& run, uint64_t chunk_length, uint64_t dest_length);

// Calls fn(chunk_offset, dest_offset, length) for every repetition, in
// order. The run must have passed CheckCopyRun.
template <typename Fn>
void ForEachCopy(const v1::CopyRun& run, Fn&& fn) {
  const uint64_t n = CopyRunRepetitions(run);
  uint64_t src = run.chunk_offset();
  uint64_t dst = run.dest_offset();
  for (uint64_t k = 0; k < n; ++k) {
    fn(src, dst, run.length());
    src += run.chunk_stride();
    dst += run.dest_stride();
  }
}

// memcpy of every repetition from `chunk` (the chunk's bytes) to `dest`
// (the request's packed buffer). The run must have passed CheckCopyRun.
void CopyStrided(const v1::CopyRun& run, const char* chunk, char* dest);

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_COPY_RUN_H_
