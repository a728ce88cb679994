#include "daemon/planning/planner_memory.h"

#include <malloc.h>

#include <limits>

namespace ckpt::planning {

void KeepFreedMemoryForReuse() {
  // Blocks from 32 MiB up (the most glibc allows here) still get their own
  // mappings; fixing the threshold stops glibc from moving it. Free space
  // at the heap's top is given back only past 2 GiB (the int's limit).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

}  // namespace ckpt::planning
