#include "daemon/storage/s3/ranged_gets.h"

#include <algorithm>
#include <numeric>

namespace ckpt::storage::s3 {

std::vector<RangedGet> PlanRangedGets(absl::Span<const IoOp> ops, size_t max_bytes,
                                      size_t max_gap) {
  max_bytes = std::max<size_t>(max_bytes, 1);
  std::vector<size_t> order(ops.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ops[a].offset < ops[b].offset; });
  std::vector<RangedGet> gets;
  bool open = false;  // gets.back() may take more
  uint64_t open_end = 0;
  for (size_t i : order) {
    const IoOp& op = ops[i];
    char* dst = static_cast<char*>(op.buffer);
    uint64_t offset = op.offset;
    size_t left = op.length;
    if (left == 0) continue;
    if (open && offset >= open_end && offset - open_end <= max_gap &&
        offset + left - gets.back().offset <= max_bytes) {
      RangedGet& get = gets.back();
      if (offset > open_end)
        get.pieces.push_back({nullptr, static_cast<size_t>(offset - open_end)});
      get.pieces.push_back({dst, left});
      open_end = offset + left;
      continue;
    }
    // A GET of its own, or several when it is long; the last may take more.
    while (left > 0) {
      const size_t n = std::min(left, max_bytes);
      gets.push_back({offset, {{dst, n}}});
      dst += n;
      offset += n;
      left -= n;
    }
    open = true;
    open_end = op.offset + op.length;
  }
  return gets;
}

}  // namespace ckpt::storage::s3
