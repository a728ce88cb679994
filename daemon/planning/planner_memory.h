// How the process's allocator treats the memory a plan frees.
//
// A cluster-scale plan builds arrays of tens to hundreds of megabytes and
// frees them when it is done. glibc's defaults hand large blocks back to
// the kernel (munmap, or trimming the heap's top), so the next plan paid
// the kernel again to zero every page it touched: a quarter to a third of
// a warm 8192-rank plan on a VM, half of a 32,768-rank load.
// KeepFreedMemoryForReuse keeps the freed heap for the next plan instead:
// the daemon's resident size stays at its largest plan's, which the
// coordinator needs again at the next step.
//
// NewOnPlanArena makes a plan's message on an arena of its own: a
// cluster's plan is millions of messages, and one heap allocation each
// (and one free each when it is dropped) was a second or more of a plan.
//
// Thread-safety: KeepFreedMemoryForReuse is called once at start-up,
// before threads allocate; NewOnPlanArena from any thread.
#ifndef CKPT_DAEMON_PLANNING_PLANNER_MEMORY_H_
#define CKPT_DAEMON_PLANNING_PLANNER_MEMORY_H_

#include <google/protobuf/arena.h>

#include <memory>

namespace ckpt::planning {

void KeepFreedMemoryForReuse();

// A message on a new arena, which the pointer owns.
template <typename Message>
std::shared_ptr<Message> NewOnPlanArena() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 64 << 10;
  options.max_block_size = 8 << 20;
  auto arena = std::make_shared<google::protobuf::Arena>(options);
  Message* message = google::protobuf::Arena::CreateMessage<Message>(arena.get());
  return std::shared_ptr<Message>(arena, message);
}

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_PLANNER_MEMORY_H_
