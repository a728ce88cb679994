// What the demo layouts (model_layout.h, parallel_layout.h) build their
// shards from.
#ifndef CKPT_TOOLS_DEMO_LAYOUT_PARTS_H_
#define CKPT_TOOLS_DEMO_LAYOUT_PARTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/types.h"

namespace ckpt::testing {

// Part k of n split into `parts` near-equal pieces.
inline std::pair<int64_t, int64_t> Split(int64_t n, int parts, int k) {
  return {n * k / parts, n * (k + 1) / parts};
}

inline HostTensor Tensor(std::string fqn, DType dtype, std::vector<int64_t> shape, Region region) {
  HostTensor t;
  t.fqn = std::move(fqn);
  t.dtype = dtype;
  t.global_shape = std::move(shape);
  t.region = std::move(region);
  return t;
}

}  // namespace ckpt::testing

#endif  // CKPT_TOOLS_DEMO_LAYOUT_PARTS_H_
