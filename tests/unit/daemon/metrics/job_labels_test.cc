#include "daemon/metrics/job_labels.h"

#include "tests/catch.h"

namespace ckpt::metrics {
namespace {

TEST_CASE("the first max_jobs jobs keep their names, later ones are _other", "[metrics]") {
  JobLabels labels(2);
  CHECK(labels.LabelFor("a") == "a");
  CHECK(labels.LabelFor("b") == "b");
  CHECK(labels.LabelFor("c") == kOtherJobs);
  // Decided once: a named job stays named, an _other one stays _other.
  CHECK(labels.LabelFor("a") == "a");
  CHECK(labels.LabelFor("c") == kOtherJobs);
}

TEST_CASE("a job called _other takes no slot", "[metrics]") {
  JobLabels labels(1);
  CHECK(labels.LabelFor(kOtherJobs) == kOtherJobs);
  CHECK(labels.LabelFor("a") == "a");
}

TEST_CASE("ExistingLabel takes no slot", "[metrics]") {
  JobLabels labels(1);
  CHECK(labels.ExistingLabel("a") == kOtherJobs);
  CHECK(labels.LabelFor("b") == "b");
  CHECK(labels.ExistingLabel("b") == "b");
  CHECK(labels.LabelFor("a") == kOtherJobs);
}

TEST_CASE("max_jobs 0 puts every job in _other", "[metrics]") {
  JobLabels labels(0);
  CHECK(labels.LabelFor("a") == kOtherJobs);
}

}  // namespace
}  // namespace ckpt::metrics
