#include "daemon/planning/planner_memory.h"

#include <malloc.h>

#include <limits>

namespace ckpt::planning {

void KeepFreedMemoryForReuse() {
  // Blocks from 32 MiB up (the most glibc allows here) still get their own
  // mappings; fixing the threshold stops glibc from moving it. Free space
  // at the heap's top is never given back (-1: glibc's "no trimming"): a
  // 2 GiB bound, the int's limit, gave a 32,768-rank load (6 GB) back to
  // the kernel after each plan, and the next one paid to have it zeroed
  // again, half its time.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, -1);
}

}  // namespace ckpt::planning
