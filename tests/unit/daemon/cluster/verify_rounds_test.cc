// The coordinator's verify rounds (cluster/verify_rounds.h): bounded for
// everyone and per caller, and ended when a host that took its order never
// reports (its one report lost), not held for ever.
#include "daemon/cluster/verify_rounds.h"

#include <map>
#include <string>

#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::cluster {
namespace {

std::map<std::string, v1::VerifyOrder> OrdersFor(const std::string& host) {
  std::map<std::string, v1::VerifyOrder> orders;
  orders[host].set_job("job");
  return orders;
}

TEST_CASE("one caller runs at most its share of verify rounds", "[verify_rounds]") {
  VerifyRounds rounds;
  for (size_t i = 0; i < VerifyRounds::kMaxRoundsPerCaller; ++i) {
    CKPT_REQUIRE_OK(rounds.Start(OrdersFor("h0"), "principal 'reader'").status());
  }
  absl::StatusOr<uint64_t> more = rounds.Start(OrdersFor("h0"), "principal 'reader'");
  REQUIRE(absl::IsResourceExhausted(more.status()));
  CHECK(more.status().message().find("limit per caller is 2") != absl::string_view::npos);
  // Another caller still gets one.
  CKPT_REQUIRE_OK(rounds.Start(OrdersFor("h0"), "principal 'admin'").status());
}

TEST_CASE("a host that took its order and never reported is given up at the answer time",
          "[verify_rounds]") {
  VerifyRounds rounds;
  absl::StatusOr<uint64_t> round = rounds.Start(OrdersFor("h0"), "principal 'admin'");
  CKPT_REQUIRE_OK(round.status());
  int taken = 0;
  rounds.TakeOrders("h0", [&](const v1::VerifyOrder&) { ++taken; });
  REQUIRE(taken == 1);
  const absl::Time now = absl::Now();
  std::map<std::string, VerifyRounds::Outcome> outcomes = rounds.Await(
      *round, [](const std::string&) { return true; }, now + absl::Hours(1), now - absl::Seconds(1),
      [] { return false; });
  REQUIRE(outcomes.count("h0") == 1);
  CHECK_FALSE(outcomes["h0"].reported);
  CHECK(outcomes["h0"].why == "took its verify order but sent no report in time");
  // The round is over: its late report is refused.
  v1::HostVerifyReport late;
  late.set_round(*round);
  late.mutable_host()->set_host("h0");
  CHECK(absl::IsNotFound(rounds.Report(late)));
}

}  // namespace
}  // namespace ckpt::cluster
