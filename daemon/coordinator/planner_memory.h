// How the process's allocator treats the memory a plan frees.
//
// A cluster-scale plan builds arrays of tens to hundreds of megabytes and
// frees them when it is done. glibc's defaults hand large blocks back to
// the kernel (munmap, or trimming the heap's top), so the next plan paid
// the kernel again to zero every page it touched: a quarter to a third of
// a warm 8192-rank plan on a VM. KeepFreedMemoryForReuse keeps up to 2 GiB
// of freed heap for the next plan instead: the coordinator's resident size
// stays at its largest plan's, which it needs again at the next step.
//
// Thread-safety: call once at start-up, before threads allocate.
#ifndef CKPT_DAEMON_COORDINATOR_PLANNER_MEMORY_H_
#define CKPT_DAEMON_COORDINATOR_PLANNER_MEMORY_H_

namespace ckpt::coordinator {

void KeepFreedMemoryForReuse();

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_PLANNER_MEMORY_H_
