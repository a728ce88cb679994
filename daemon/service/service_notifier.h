// Tells systemd how ckptd is doing (sd_notify): READY=1 once it serves,
// STATUS= lines with what is in flight, WATCHDOG=1 while the daemon's
// housekeeping loop runs, STOPPING=1 at shutdown. Without NOTIFY_SOCKET in
// the environment (not started by systemd with Type=notify) every call is
// a no-op.
//
// The watchdog is fed from the loop that reaps sessions (NodeDaemon), not
// from a thread of its own: a daemon whose housekeeping is stuck stops
// feeding it, and systemd restarts it.
//
// Thread-safety: Tick from one thread; the others from any.
#ifndef CKPT_DAEMON_SERVICE_SERVICE_NOTIFIER_H_
#define CKPT_DAEMON_SERVICE_SERVICE_NOTIFIER_H_

#include <string>

#include "absl/time/time.h"

namespace ckpt::service {

class ServiceNotifier {
 public:
  ServiceNotifier();  // reads WATCHDOG_USEC (sd_watchdog_enabled)

  void Ready(const std::string& status);
  void Stopping(const std::string& status);
  // Feeds the watchdog (at half its period) and refreshes STATUS= when it
  // changed, at most once a second.
  void Tick(absl::Time now, const std::string& status);
  bool watchdog_enabled() const { return watchdog_period_ > absl::ZeroDuration(); }

 private:
  absl::Duration watchdog_period_ = absl::ZeroDuration();
  absl::Time next_ping_ = absl::InfinitePast();
  absl::Time next_status_ = absl::InfinitePast();
  std::string last_status_;
};

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_SERVICE_NOTIFIER_H_
