// Threads for work that waits on other hosts (the commit of a save spread
// over hosts waits for every host to report), kept off the writer threads
// and the gRPC handlers: a writer blocked there would stall every other
// save's chunks queued behind it, and two jobs spanning the same hosts
// could each hold the writer the other needs. One thread per task; they
// are joined by Drain (at shutdown, once their waits are cancelled).
//
// Thread-safety: all methods are safe from any thread.
#ifndef CKPT_DAEMON_EXEC_BACKGROUND_TASKS_H_
#define CKPT_DAEMON_EXEC_BACKGROUND_TASKS_H_

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::exec {

class BackgroundTasks {
 public:
  BackgroundTasks() = default;
  ~BackgroundTasks() { Drain(); }
  BackgroundTasks(const BackgroundTasks&) = delete;
  BackgroundTasks& operator=(const BackgroundTasks&) = delete;

  // Runs `task` on a thread of its own (and joins the ones that ended).
  void Spawn(std::function<void()> task);
  // Waits for every task spawned so far.
  void Drain();

 private:
  struct Task {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  absl::Mutex mu_;
  std::list<Task> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::exec

#endif  // CKPT_DAEMON_EXEC_BACKGROUND_TASKS_H_
