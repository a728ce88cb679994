// Reader threads, shared by every load of the daemon (as the writers are by
// every save): a fixed set of --reader_threads threads, so a host's thread
// count does not grow with the loads in flight. A load hands over one task
// per group it reads and queues the next when that one is done, so the
// threads go round the concurrent loads a group at a time and no load waits
// for another to finish.
//
// Thread-safety: Submit may be called from any thread, including the pool's.
#ifndef CKPT_DAEMON_EXEC_READER_POOL_H_
#define CKPT_DAEMON_EXEC_READER_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::exec {

class ReaderPool {
 public:
  // `prepare` runs first on every thread (the storage's per-thread set-up,
  // Backend::PrepareThread); the constructor returns once all have run it.
  explicit ReaderPool(int threads, std::function<void()> prepare = nullptr);
  ~ReaderPool() { Stop(); }
  ReaderPool(const ReaderPool&) = delete;
  ReaderPool& operator=(const ReaderPool&) = delete;

  // Queues the task (FIFO). False once the pool is stopping: the task is
  // destroyed without running.
  bool Submit(std::function<void()> task);
  int threads() const { return thread_count_; }
  // Tasks not started are dropped (destroyed, not run), running ones finish,
  // and later Submits are refused. Idempotent. The daemon stops its readers
  // while the loads they would destroy can still reach the daemon's parts.
  void Stop();

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  const int thread_count_;
  std::vector<std::thread> threads_;  // joined by Stop
};

}  // namespace ckpt::exec

#endif  // CKPT_DAEMON_EXEC_READER_POOL_H_
