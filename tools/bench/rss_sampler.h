// The peak of a process's private memory (RssAnon in /proc/<pid>/status:
// heap, stacks, anonymous maps), sampled by a background thread. ckptd's
// pool is a shared-memory file, so it is not counted: what is left is the
// daemon's own footprint, which must stay bounded whatever the state size.
#ifndef CKPT_TOOLS_BENCH_RSS_SAMPLER_H_
#define CKPT_TOOLS_BENCH_RSS_SAMPLER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace ckpt::bench {

class RssSampler {
 public:
  // Samples every 20 ms until destroyed.
  explicit RssSampler(pid_t pid);
  ~RssSampler();
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;

  uint64_t peak_anon_bytes() const { return peak_.load(std::memory_order_relaxed); }

 private:
  void Sample();

  const pid_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_{0};
  std::thread thread_;
};

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_RSS_SAMPLER_H_
