#include "client/src/parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace ckpt::client {
namespace {

constexpr size_t kSplitBytes = 8 << 20;  // big enough to amortise, small enough to balance

std::vector<CopyPiece> Split(const std::vector<CopyPiece>& pieces) {
  std::vector<CopyPiece> split;
  for (const CopyPiece& p : pieces) {
    for (size_t off = 0; off < p.length; off += kSplitBytes) {
      split.push_back({p.dst + off, p.src + off, std::min(kSplitBytes, p.length - off)});
    }
  }
  return split;
}

}  // namespace

void ParallelCopy(const std::vector<CopyPiece>& pieces, int threads) {
  const std::vector<CopyPiece> split = Split(pieces);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < split.size(); i = next++) {
      std::memcpy(split[i].dst, split[i].src, split[i].length);
    }
  };
  const int n =
      static_cast<int>(std::clamp<size_t>(std::min<size_t>(threads, split.size()), 1, 64));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

CopyPool::CopyPool(int threads) {
  const int n = std::clamp(threads, 1, 64);
  for (int t = 0; t < n; ++t) threads_.emplace_back([this] { Run(); });
}

CopyPool::~CopyPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void CopyPool::Start(std::vector<CopyPiece> pieces) {
  std::vector<CopyPiece> split = Split(pieces);
  absl::MutexLock lock(&mu_);
  units_ = std::move(split);
  next_ = 0;
  left_ = units_.size();
}

void CopyPool::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](size_t* left) { return *left == 0; }, &left_));
}

void CopyPool::Run() {
  for (;;) {
    CopyPiece piece;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CopyPool* p)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return p->stop_ || p->next_ < p->units_.size(); },
          this));
      if (next_ >= units_.size()) return;  // stopping
      piece = units_[next_++];
    }
    std::memcpy(piece.dst, piece.src, piece.length);
    absl::MutexLock lock(&mu_);
    --left_;
  }
}

}  // namespace ckpt::client
