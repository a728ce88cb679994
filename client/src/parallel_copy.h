// Copies many (dst, src, length) pieces with several threads: a host-tensor
// snapshot is memory-bandwidth bound and one core does not saturate it.
#ifndef CKPT_CLIENT_SRC_PARALLEL_COPY_H_
#define CKPT_CLIENT_SRC_PARALLEL_COPY_H_

#include <cstddef>
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

}  // namespace ckpt::client

#endif  // CKPT_CLIENT_SRC_PARALLEL_COPY_H_
