#include "daemon/metrics/event_log.h"

#include <string>
#include <vector>

#include "tests/catch.h"

namespace ckpt::metrics {
namespace {

TEST_CASE("QuoteValue keeps a line one line and cuts long text", "[metrics]") {
  CHECK(QuoteValue("plain") == "\"plain\"");
  CHECK(QuoteValue("two\nlines \"quoted\"") == "\"two\\nlines \\\"quoted\\\"\"");
  CHECK(QuoteValue(std::string(600, 'x'), 512) == "\"" + std::string(512, 'x') + "...\"");
}

TEST_CASE("refusal lines are limited per second and the rest counted", "[metrics]") {
  std::vector<std::string> lines;
  EventLog log([&](const std::string& line) { lines.push_back(line); }, 3);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  for (int i = 0; i < 100; ++i)
    log.Refusal(t0 + absl::Milliseconds(i), "refused " + std::to_string(i));
  REQUIRE(lines.size() == 3);
  CHECK(lines[2] == "refused 2");

  // Events are never limited.
  log.Event("save line");
  REQUIRE(lines.size() == 4);

  // Within the window a tick reports nothing yet; after it, the count.
  log.Tick(t0 + absl::Milliseconds(500));
  REQUIRE(lines.size() == 4);
  log.Tick(t0 + absl::Seconds(2));
  REQUIRE(lines.size() == 5);
  CHECK(lines[4].find("97 more refusals not logged") != std::string::npos);

  // Reported once; a new window has its full quota.
  log.Tick(t0 + absl::Seconds(3));
  CHECK(lines.size() == 5);
  for (int i = 0; i < 3; ++i) log.Refusal(t0 + absl::Seconds(4), "again");
  CHECK(lines.size() == 8);
}

TEST_CASE("the suppressed count comes before the next window's first refusal", "[metrics]") {
  std::vector<std::string> lines;
  EventLog log([&](const std::string& line) { lines.push_back(line); }, 1);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  log.Refusal(t0, "first");
  log.Refusal(t0, "second");
  log.Refusal(t0 + absl::Seconds(1), "third");
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "first");
  CHECK(lines[1].find("1 more refusals not logged") != std::string::npos);
  CHECK(lines[2] == "third");
}

}  // namespace
}  // namespace ckpt::metrics
