// Giving the heap a refused or failed request freed back to the system.
// glibc keeps freed memory in its arenas for reuse: one 255 MiB gRPC message
// that gRPC received whole and then refused left ckptd 175 MiB larger, a
// plan of 10^6 tensors 128 MiB, a MANIFEST of 10^7 chunks 2.2 GiB, for as
// long as the daemon ran, and planner_memory.h keeps freed heap on purpose
// (no trimming of the heap's top) so that the next plan does not pay the
// kernel to zero its pages again.
//
// HeapTrimmer, ticked from the daemon's reap loop, looks at the heap once
// a second: when the resident heap beyond what malloc has in use grew by
// more than a slack since the last trim, malloc_trim(0) returns the free
// pages of every arena (the many small blocks a parsed message was made
// of, wherever they lie). malloc_trim does not shrink the top of a
// thread's arena, only the main one's: that is left to free(), past
// M_TRIM_THRESHOLD, which the trimmer lowers to kArenaTopBytes (from
// planner_memory's "never"), so each arena keeps at most that much at its
// top. Blocks of 32 MiB and more are mapped on their own and unmapped when
// freed (planner_memory.cc). This gives back a plan's freed memory too,
// within a second: a cluster-scale plan then touches fresh pages again at
// the next step, the price of a daemon whose size does not stay at its
// largest request's (--return_freed_memory=false keeps it).
//
// Thread-safety: a HeapTrimmer is used from one thread (the reap loop).
#ifndef CKPT_DAEMON_SERVICE_HEAP_TRIM_H_
#define CKPT_DAEMON_SERVICE_HEAP_TRIM_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace ckpt::service {

inline constexpr int kArenaTopBytes = 16 << 20;

struct HeapTrimPolicy {
  // false: the trimmer does nothing, and the heap stays as planner_memory.h
  // sets it.
  bool enabled = true;
  // Growth of the resident-but-free heap that is tolerated before a trim.
  uint64_t slack_bytes = uint64_t{32} << 20;
  // How often the heap is looked at (mallinfo2 walks the arenas' free lists).
  absl::Duration interval = absl::Seconds(1);
};

// The decision, apart from the measuring: `free_resident` is the resident
// heap beyond what is in use now; `after_last_trim` what it was after the
// last trim (lowered whenever it falls, as memory is reused). What never
// comes back (thread stacks, maps that are not malloc's) stays in
// `after_last_trim` and does not make every tick trim again.
bool ShouldTrimHeap(uint64_t free_resident, uint64_t after_last_trim, uint64_t slack_bytes);

class HeapTrimmer {
 public:
  // Lowers M_TRIM_THRESHOLD when enabled.
  explicit HeapTrimmer(HeapTrimPolicy policy = {});

  // Looks at the heap at most once per interval; trims when ShouldTrimHeap.
  void Tick(absl::Time now);
  int trims() const { return trims_; }

 private:
  const HeapTrimPolicy policy_;
  absl::Time next_look_ = absl::InfinitePast();
  std::optional<uint64_t> after_last_trim_;
  int trims_ = 0;
};

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_HEAP_TRIM_H_
