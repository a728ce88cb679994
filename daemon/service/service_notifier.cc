#include "daemon/service/service_notifier.h"

#include <systemd/sd-daemon.h>

#include "absl/strings/str_cat.h"

namespace ckpt::service {
namespace {

constexpr absl::Duration kStatusInterval = absl::Seconds(1);

// STATUS= is one line.
std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

}  // namespace

ServiceNotifier::ServiceNotifier() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 && usec > 0) {
    watchdog_period_ = absl::Microseconds(static_cast<int64_t>(usec));
  }
}

void ServiceNotifier::Ready(const std::string& status) {
  sd_notify(0, absl::StrCat("READY=1\nSTATUS=", OneLine(status)).c_str());
}

void ServiceNotifier::Stopping(const std::string& status) {
  sd_notify(0, absl::StrCat("STOPPING=1\nSTATUS=", OneLine(status)).c_str());
}

void ServiceNotifier::Tick(absl::Time now, const std::string& status) {
  if (watchdog_enabled() && now >= next_ping_) {
    sd_notify(0, "WATCHDOG=1");
    next_ping_ = now + watchdog_period_ / 2;
  }
  if (now >= next_status_ && status != last_status_) {
    sd_notify(0, absl::StrCat("STATUS=", OneLine(status)).c_str());
    last_status_ = status;
    next_status_ = now + kStatusInterval;
  }
}

}  // namespace ckpt::service
