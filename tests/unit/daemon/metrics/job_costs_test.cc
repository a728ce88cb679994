// Each job's checkpoint cost as `ckptctl status` shows it: smoothed over
// its saves, the interval from their starts, and a bounded number of jobs.
#include "daemon/metrics/job_costs.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/catch.h"

namespace ckpt::metrics {
namespace {

const JobCost* Find(const std::vector<JobCost>& all, const std::string& job) {
  for (const JobCost& c : all) {
    if (c.job == job) return &c;
  }
  return nullptr;
}

TEST_CASE("a job's checkpoint cost is smoothed over its saves", "[unit][metrics]") {
  JobCosts costs;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  costs.Saved("a", t0, absl::Seconds(2), absl::Seconds(10), t0 + absl::Seconds(10));
  std::vector<JobCost> all = costs.All();
  REQUIRE(all.size() == 1);
  CHECK(all[0].saves == 1);
  CHECK(all[0].snapshot_s == Approx(2));
  CHECK(all[0].persist_s == Approx(10));
  CHECK(all[0].interval_s == 0);  // one save: no interval yet

  // 60 s later, a slower snapshot: the first interval is taken whole, the
  // costs move by 0.3 of the difference.
  costs.Saved("a", t0 + absl::Seconds(60), absl::Seconds(4), absl::Seconds(20),
              t0 + absl::Seconds(80));
  all = costs.All();
  CHECK(all[0].saves == 2);
  CHECK(all[0].interval_s == Approx(60));
  CHECK(all[0].snapshot_s == Approx(2 + 0.3 * 2));
  CHECK(all[0].persist_s == Approx(10 + 0.3 * 10));
  costs.Saved("a", t0 + absl::Seconds(160), absl::Seconds(4), absl::Seconds(20),
              t0 + absl::Seconds(180));
  CHECK(costs.All()[0].interval_s == Approx(60 + 0.3 * 40));
  CHECK(costs.All()[0].last_commit == t0 + absl::Seconds(180));
  // Another job is its own.
  costs.Saved("b", t0, absl::Seconds(1), absl::Seconds(1), t0 + absl::Seconds(1));
  all = costs.All();
  REQUIRE(Find(all, "b") != nullptr);
  CHECK(Find(all, "b")->saves == 1);
  CHECK(Find(all, "a")->saves == 3);
}

TEST_CASE("job costs keep at most kMaxJobs, dropping the least recent", "[unit][metrics]") {
  JobCosts costs;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (size_t i = 0; i < JobCosts::kMaxJobs + 10; ++i) {
    const absl::Time at = t0 + absl::Seconds(static_cast<int64_t>(i));
    costs.Saved(absl::StrCat("job", i), at, absl::Seconds(1), absl::Seconds(1), at);
  }
  const std::vector<JobCost> all = costs.All();
  CHECK(all.size() == JobCosts::kMaxJobs);
  CHECK(Find(all, "job0") == nullptr);  // the least recent went
  CHECK(Find(all, "job9") == nullptr);
  CHECK(Find(all, "job10") != nullptr);
  CHECK(Find(all, absl::StrCat("job", JobCosts::kMaxJobs + 9)) != nullptr);
}

}  // namespace
}  // namespace ckpt::metrics
