// Copies many (dst, src, length) pieces with several threads: a host-tensor
// snapshot is memory-bandwidth bound and one core does not saturate it.
#ifndef CKPT_CLIENT_SRC_PARALLEL_COPY_H_
#define CKPT_CLIENT_SRC_PARALLEL_COPY_H_

#include <cstddef>
#include <functional>
#include <vector>

namespace ckpt::client {

struct CopyPiece {
  char* dst;
  const char* src;
  size_t length;
};

// Splits large pieces and copies them on up to `threads` threads (the
// calling thread included); returns when all are done.
void ParallelCopy(const std::vector<CopyPiece>& pieces, int threads);

// Copies batches of pieces in order on one set of threads that streams
// through all of them (no barrier between batches), calling
// on_batch_done(k) once batch k and every batch before it are copied, in
// order, from whichever thread completed it. Returns when all are done.
void ParallelCopyBatches(const std::vector<std::vector<CopyPiece>>& batches, int threads,
                         const std::function<void(size_t)>& on_batch_done);

}  // namespace ckpt::client

#endif  // CKPT_CLIENT_SRC_PARALLEL_COPY_H_
