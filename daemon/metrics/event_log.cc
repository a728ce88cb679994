#include "daemon/metrics/event_log.h"

#include <cstdio>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckpt::metrics {
namespace {

constexpr absl::Duration kWindow = absl::Seconds(1);

void WriteToStderr(const std::string& line) {
  // One write per line (stderr is unbuffered), so concurrent lines do not
  // interleave.
  const std::string out = line + "\n";
  std::fwrite(out.data(), 1, out.size(), stderr);
}

}  // namespace

std::string QuoteValue(absl::string_view text, size_t max_bytes) {
  const bool cut = text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  return absl::StrCat("\"", absl::CEscape(text), cut ? "..." : "", "\"");
}

EventLog::EventLog(Sink sink, int refusals_per_second)
    : sink_(sink ? std::move(sink) : Sink(WriteToStderr)),
      per_window_(refusals_per_second < 0 ? 0 : refusals_per_second) {}

void EventLog::Event(const std::string& line) { sink_(line); }

std::string EventLog::RollLocked(absl::Time now) {
  if (now < window_start_ + kWindow) return "";
  std::string report;
  if (suppressed_ > 0) {
    report =
        absl::StrFormat("ckptd: refused: %d more refusals not logged since %s", suppressed_,
                        absl::FormatTime(absl::RFC3339_sec, window_start_, absl::UTCTimeZone()));
  }
  window_start_ = now;
  written_ = 0;
  suppressed_ = 0;
  return report;
}

void EventLog::Refusal(absl::Time now, const std::string& line) {
  std::string report;
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    report = RollLocked(now);
    write = written_ < per_window_;
    if (write) {
      ++written_;
    } else {
      ++suppressed_;
    }
  }
  if (!report.empty()) sink_(report);
  if (write) sink_(line);
}

void EventLog::Tick(absl::Time now) {
  std::string report;
  {
    absl::MutexLock lock(&mu_);
    // Nothing to report: leave the window alone, so a quiet daemon's
    // refusals still get their full quota when they come.
    if (suppressed_ == 0) return;
    report = RollLocked(now);
  }
  if (!report.empty()) sink_(report);
}

}  // namespace ckpt::metrics
