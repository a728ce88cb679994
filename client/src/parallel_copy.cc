#include "client/src/parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
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

void ParallelCopyBatches(const std::vector<std::vector<CopyPiece>>& batches, int threads,
                         const std::function<void(size_t)>& on_batch_done) {
  struct Unit {
    CopyPiece piece;
    size_t batch;
  };
  std::vector<Unit> units;
  std::vector<std::atomic<size_t>> remaining(batches.size());
  for (size_t b = 0; b < batches.size(); ++b) {
    size_t count = 0;
    for (const CopyPiece& p : batches[b]) {
      for (size_t off = 0; off < p.length; off += kSplitBytes) {
        units.push_back({{p.dst + off, p.src + off, std::min(kSplitBytes, p.length - off)}, b});
        ++count;
      }
    }
    remaining[b].store(count);
  }
  std::mutex order_mu;
  size_t next_done = 0;  // guarded by order_mu: batches reported so far
  auto report_ready = [&] {
    std::lock_guard<std::mutex> lock(order_mu);
    while (next_done < batches.size() && remaining[next_done].load() == 0) {
      on_batch_done(next_done++);
    }
  };
  report_ready();  // empty batches at the front
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < units.size(); i = next++) {
      std::memcpy(units[i].piece.dst, units[i].piece.src, units[i].piece.length);
      if (remaining[units[i].batch].fetch_sub(1) == 1) report_ready();
    }
  };
  const int n = static_cast<int>(std::clamp<size_t>(std::min<size_t>(threads, units.size()), 1, 64));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  report_ready();
}

}  // namespace ckpt::client
