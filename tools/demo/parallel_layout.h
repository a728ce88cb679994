// A transformer's state as a 3-D parallel trainer shards it, for the tests
// of jobs spread over hosts and the demo: tensor parallelism splits each
// layer's weights by rows or columns (as Megatron's column- and row-parallel
// linears do), pipeline parallelism gives each stage its own layers, data
// parallelism replicates the weights and cuts the optimizer state into
// flat ranges (FSDP / ZeRO style). Any two layouts hold the same tensors,
// so a save under one loads under any other (TP=2 x PP=2 x DP=2 into
// TP=3 x DP=2, or into one rank holding everything).
#ifndef CKPT_TOOLS_DEMO_PARALLEL_LAYOUT_H_
#define CKPT_TOOLS_DEMO_PARALLEL_LAYOUT_H_

#include <vector>

#include "ckpt/types.h"

namespace ckpt::testing {

struct Parallelism {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int world() const { return tp * pp * dp; }
};

// Rank `rank`'s tensors (data == nullptr): TP index fastest, then the
// pipeline stage, then the data-parallel replica (Megatron's order).
// `scale` multiplies the hidden size (1: about 2 MiB of unique state).
std::vector<HostTensor> ParallelLayout(int rank, Parallelism parallel, int scale);

}  // namespace ckpt::testing

#endif  // CKPT_TOOLS_DEMO_PARALLEL_LAYOUT_H_
