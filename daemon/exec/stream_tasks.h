// Transfers between hosts that must not wait on each other in a cycle (the
// copies of a memory-tier save, erasure_transfer.h and replica_transfer.h)
// run each stream on a thread of its own: a stream waits only for its own
// peer. StreamTasks runs them and gathers the first error; a stream that
// fails stops the others, which ask Stop().
//
// Thread-safety: Add and Run from one thread; Stop's predicate from any.
#ifndef CKPT_DAEMON_EXEC_STREAM_TASKS_H_
#define CKPT_DAEMON_EXEC_STREAM_TASKS_H_

#include <atomic>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::exec {

class StreamTasks {
 public:
  void Add(std::function<absl::Status()> task) { tasks_.push_back(std::move(task)); }
  // True once a task failed or `cancelled` says so.
  std::function<bool()> Stop(const std::function<bool()>& cancelled) {
    return [this, cancelled] { return failed_.load() || (cancelled && cancelled()); };
  }
  // Runs every task at once; the first error, once all ended.
  absl::Status Run() {
    std::vector<std::thread> threads;
    for (auto& task : tasks_) {
      threads.emplace_back([this, &task] {
        absl::Status s = task();
        if (s.ok()) return;
        absl::MutexLock lock(&mu_);
        if (first_.ok()) first_ = s;
        failed_.store(true);
      });
    }
    for (std::thread& t : threads) t.join();
    absl::MutexLock lock(&mu_);
    return first_;
  }

 private:
  std::vector<std::function<absl::Status()>> tasks_;
  std::atomic<bool> failed_{false};
  absl::Mutex mu_;
  absl::Status first_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::exec

#endif  // CKPT_DAEMON_EXEC_STREAM_TASKS_H_
