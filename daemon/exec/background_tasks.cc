#include "daemon/exec/background_tasks.h"

#include <utility>

namespace ckpt::exec {

void BackgroundTasks::Spawn(std::function<void()> task) {
  std::list<Task> ended;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      auto next = std::next(it);
      if (it->done->load(std::memory_order_acquire)) ended.splice(ended.end(), tasks_, it);
      it = next;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    tasks_.push_back(Task{std::thread([task = std::move(task), done] {
                            task();
                            done->store(true, std::memory_order_release);
                          }),
                          done});
  }
  for (Task& t : ended) t.thread.join();  // outside mu_: they have ended, or nearly
}

void BackgroundTasks::Drain() {
  std::list<Task> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(tasks_);
  }
  for (Task& t : all) t.thread.join();
}

}  // namespace ckpt::exec
