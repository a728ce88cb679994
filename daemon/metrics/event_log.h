// One line on stderr (which the journal takes) per save, load and refused
// request, as greppable key=value pairs, e.g.
//
//   ckptd: save job=llm step=100 bytes=1048576 duration_s=0.412 outcome=ok code=OK ...
//   ckptd: load job=llm step=100 bytes=1048576 duration_s=0.101 outcome=failed code=DATA_LOSS
//   error="..." ckptd: refused method=PlanSave code=INVALID_ARGUMENT peer="unix:" error="..."
//
// Saves and loads come at the ranks' pace; refusals do not: a broken or
// hostile client can be refused thousands of times a second, and the
// journal must not fill with it. So refusal lines are rate-limited (at most
// `refusals_per_second` in each one-second window); the ones left out are
// counted and reported as one "suppressed" line once their window is over
// (at the next refusal or the next Tick). Every refusal is still counted in
// the metrics.
//
// Thread-safety: safe from any thread.
#ifndef CKPT_DAEMON_METRICS_EVENT_LOG_H_
#define CKPT_DAEMON_METRICS_EVENT_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ckpt::metrics {

// A free-text value (an error message, a peer) for a key=value line:
// double-quoted and C-escaped, so no newline or quote in it can break the
// line or forge another, and cut after `max_bytes` of input.
std::string QuoteValue(absl::string_view text, size_t max_bytes = 512);

class EventLog {
 public:
  // Receives each line, without its newline. Default: stderr.
  using Sink = std::function<void(const std::string& line)>;
  explicit EventLog(Sink sink = nullptr, int refusals_per_second = 10);

  // A save's or load's line: never limited.
  void Event(const std::string& line);
  // A refusal's line, unless its window's quota is spent.
  void Refusal(absl::Time now, const std::string& line) ABSL_LOCKS_EXCLUDED(mu_);
  // Reports what a window now over suppressed; the daemon calls it
  // periodically so the count shows up even when the refusals stop.
  void Tick(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Starts a new window if `now` is past the current one; returns the line
  // reporting the old window's suppressed refusals, or "".
  std::string RollLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Sink sink_;
  const int per_window_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ckpt::metrics

#endif  // CKPT_DAEMON_METRICS_EVENT_LOG_H_
