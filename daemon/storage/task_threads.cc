#include "daemon/storage/task_threads.h"

#include <algorithm>
#include <utility>

#include "absl/synchronization/blocking_counter.h"

namespace ckpt::storage {

TaskThreads::TaskThreads(int threads, std::function<void()> prepare)
    : thread_count_(std::max(1, threads)) {
  absl::BlockingCounter prepared(thread_count_);
  for (int i = 0; i < thread_count_; ++i) {
    threads_.emplace_back([this, &prepare, &prepared] {
      if (prepare) prepare();
      prepared.DecrementCount();
      Run();
    });
  }
  prepared.Wait();
}

void TaskThreads::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    dropped.swap(tasks_);
  }
  // Destroyed outside the lock: a task may hold the last reference to a
  // load, whose destructor must be free to take its own locks.
  dropped.clear();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

bool TaskThreads::Submit(std::function<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      tasks_.push_back(std::move(task));
      return true;
    }
  }
  task = nullptr;  // outside the lock, as above
  return false;
}

void TaskThreads::Run() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](TaskThreads* p)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stop_ || !p->tasks_.empty(); },
          this));
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
    task = nullptr;  // release what it holds before waiting again
  }
}

}  // namespace ckpt::storage
