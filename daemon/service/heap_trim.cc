#include "daemon/service/heap_trim.h"

#include <unistd.h>

#include <cstdio>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ckpt::service {
namespace {

// The heap resident beyond what malloc has handed out: RssAnon (resident
// minus shared in /proc/self/statm; the pool is shared memory and not in
// it) less the bytes in use, arena blocks and mapped ones.
std::optional<uint64_t> FreeResidentBytes() {
#if defined(__GLIBC__)
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return std::nullopt;
  unsigned long long size = 0, resident = 0, shared = 0;
  const int read = std::fscanf(statm, "%llu %llu %llu", &size, &resident, &shared);
  std::fclose(statm);
  if (read != 3 || resident < shared) return std::nullopt;
  const uint64_t anon = (resident - shared) * static_cast<uint64_t>(getpagesize());
  const struct mallinfo2 info = mallinfo2();
  const uint64_t in_use = info.uordblks + info.hblkhd;
  return anon > in_use ? anon - in_use : 0;
#else
  return std::nullopt;
#endif
}

}  // namespace

HeapTrimmer::HeapTrimmer(HeapTrimPolicy policy) : policy_(policy) {
#if defined(__GLIBC__)
  if (policy_.enabled) mallopt(M_TRIM_THRESHOLD, kArenaTopBytes);
#endif
}

bool ShouldTrimHeap(uint64_t free_resident, uint64_t after_last_trim, uint64_t slack_bytes) {
  return free_resident > after_last_trim && free_resident - after_last_trim > slack_bytes;
}

void HeapTrimmer::Tick(absl::Time now) {
  if (!policy_.enabled || now < next_look_) return;
  next_look_ = now + policy_.interval;
  const std::optional<uint64_t> free_resident = FreeResidentBytes();
  if (!free_resident) return;
  if (!after_last_trim_ || *free_resident < *after_last_trim_) {
    after_last_trim_ = *free_resident;
    return;
  }
  if (!ShouldTrimHeap(*free_resident, *after_last_trim_, policy_.slack_bytes)) return;
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  ++trims_;
  after_last_trim_ = FreeResidentBytes().value_or(*free_resident);
}

}  // namespace ckpt::service
