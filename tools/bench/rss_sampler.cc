#include "tools/bench/rss_sampler.h"

#include <chrono>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace ckpt::bench {

RssSampler::RssSampler(pid_t pid) : pid_(pid) {
  thread_ = std::thread([this] {
    while (!stop_.load(std::memory_order_relaxed)) {
      Sample();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
}

RssSampler::~RssSampler() {
  stop_ = true;
  thread_.join();
}

void RssSampler::Sample() {
  std::ifstream status(absl::StrCat("/proc/", pid_, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssAnon:", 0) != 0) continue;
    const uint64_t kib = std::stoull(line.substr(8));  // "RssAnon:   1234 kB"
    uint64_t peak = peak_.load(std::memory_order_relaxed);
    while (kib * 1024 > peak && !peak_.compare_exchange_weak(peak, kib * 1024)) {
    }
    return;
  }
}

}  // namespace ckpt::bench
