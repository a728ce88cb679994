#include "client/src/parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

namespace ckpt::client {
namespace {

constexpr size_t kSplitBytes = 8 << 20;  // big enough to amortise, small enough to balance

}  // namespace

void ParallelCopy(const std::vector<CopyPiece>& pieces, int threads) {
  std::vector<CopyPiece> split;
  size_t total = 0;
  for (const CopyPiece& p : pieces) {
    for (size_t off = 0; off < p.length; off += kSplitBytes) {
      split.push_back({p.dst + off, p.src + off, std::min(kSplitBytes, p.length - off)});
    }
    total += p.length;
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < split.size(); i = next++) {
      std::memcpy(split[i].dst, split[i].src, split[i].length);
    }
  };
  const int n = static_cast<int>(
      std::clamp<size_t>(std::min<size_t>(threads, split.size()), 1, 64));
  if (n <= 1 || total < kSplitBytes) {
    worker();
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

}  // namespace ckpt::client
