// Runs one call at a time on a thread of its own and hands back its result,
// so the owner does something else meanwhile: a save asks the daemon for its
// next batch while it submits this one (client.cc says why it may not ask
// first). The thread lives as long as the object: one started per call
// (std::async) cost more than the round trip it hid.
//
// Thread-safety: one owner thread calls Start, Take and Settle. The call
// runs on the object's thread, so it may wait on what the owner does after
// Start (a submit), but not on the owner's Take.
#ifndef CKPT_CLIENT_SRC_AHEAD_CALL_H_
#define CKPT_CLIENT_SRC_AHEAD_CALL_H_

#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::client {

template <typename T>
class AheadCall {
 public:
  using Call = std::function<absl::StatusOr<T>()>;

  AheadCall() : thread_([this] { Run(); }) {}
  // Lets a call started and not taken finish first: it may read the
  // owner's state.
  ~AheadCall() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  AheadCall(const AheadCall&) = delete;
  AheadCall& operator=(const AheadCall&) = delete;

  // Hands `call` to the thread and returns. A call started before and not
  // taken is settled first.
  void Start(Call call) {
    Settle();
    absl::MutexLock lock(&mu_);
    call_ = std::move(call);
    pending_ = true;
  }

  // Waits for the call started last and returns what it returned.
  absl::StatusOr<T> Take() {
    absl::MutexLock lock(&mu_);
    if (!pending_) return absl::FailedPreconditionError("AheadCall::Take with no call started");
    mu_.Await(absl::Condition(
        +[](std::optional<absl::StatusOr<T>>* r) { return r->has_value(); }, &result_));
    absl::StatusOr<T> out = *std::move(result_);
    result_.reset();
    pending_ = false;
    return out;
  }

  // Waits for a call started and not taken, if any, and drops its result:
  // before the state it reads goes (an owner returning early).
  void Settle() {
    bool pending;
    {
      absl::MutexLock lock(&mu_);
      pending = pending_;
    }
    if (pending) (void)Take();
  }

 private:
  void Run() {
    for (;;) {
      Call call;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &AheadCall::HasWork));
        if (call_ == nullptr) return;  // stopping, nothing left to run
        call = std::move(call_);
        call_ = nullptr;
      }
      absl::StatusOr<T> result = call();
      absl::MutexLock lock(&mu_);
      result_ = std::move(result);
    }
  }

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return call_ != nullptr || stop_; }

  absl::Mutex mu_;
  Call call_ ABSL_GUARDED_BY(mu_);  // started, not yet picked up by the thread
  std::optional<absl::StatusOr<T>> result_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;  // started and not taken
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it starts once the rest is built
};

}  // namespace ckpt::client

#endif  // CKPT_CLIENT_SRC_AHEAD_CALL_H_
