#include "client/src/parallel_copy.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

void CopyBytes(char* dst, const char* src, size_t length) {
#if defined(__SSE2__)
  if (length >= kStreamBytes) {
    // Up to the destination's next 16-byte boundary, then 64 bytes a step
    // (loads unaligned: the source's alignment is the caller's), the tail.
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    length -= head;
    const size_t body = length & ~size_t{63};
    for (size_t i = 0; i < body; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    // Streaming stores are weakly ordered: done before anyone is told.
    _mm_sfence();
    std::memcpy(dst + body, src + body, length - body);
    return;
  }
#endif
  std::memcpy(dst, src, length);
}

void ParallelCopy(const std::vector<CopyPiece>& pieces, int threads) {
  const std::vector<CopyPiece> split = Split(pieces);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < split.size(); i = next++) {
      CopyBytes(split[i].dst, split[i].src, split[i].length);
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
    CopyBytes(piece.dst, piece.src, piece.length);
    absl::MutexLock lock(&mu_);
    --left_;
  }
}

}  // namespace ckpt::client
