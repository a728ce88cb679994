// A fixed set of threads running queued tasks in order: the daemon's reader
// threads (exec/reader_pool.h) and the S3 backend's transfers
// (s3/s3_backend.h), so that neither grows its thread count with the work
// in flight.
//
// Thread-safety: Submit may be called from any thread, including the pool's.
#ifndef CKPT_DAEMON_STORAGE_TASK_THREADS_H_
#define CKPT_DAEMON_STORAGE_TASK_THREADS_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::storage {

class TaskThreads {
 public:
  // `prepare` runs first on every thread (the storage's per-thread set-up,
  // Backend::PrepareThread); the constructor returns once all have run it.
  explicit TaskThreads(int threads, std::function<void()> prepare = nullptr);
  ~TaskThreads() { Stop(); }
  TaskThreads(const TaskThreads&) = delete;
  TaskThreads& operator=(const TaskThreads&) = delete;

  // Queues the task (FIFO). False once the pool is stopping: the task is
  // destroyed without running.
  bool Submit(std::function<void()> task);
  int threads() const { return thread_count_; }
  // Tasks not started are dropped (destroyed, not run), running ones finish,
  // and later Submits are refused. Idempotent. The daemon stops its readers
  // while the loads they would destroy can still reach the daemon's parts;
  // the S3 backend's files wait for their own tasks, so none are queued
  // when it stops.
  void Stop();

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  const int thread_count_;
  std::vector<std::thread> threads_;  // joined by Stop
};

}  // namespace ckpt::storage

#endif  // CKPT_DAEMON_STORAGE_TASK_THREADS_H_
