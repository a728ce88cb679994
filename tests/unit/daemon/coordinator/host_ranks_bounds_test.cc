// What hosts heartbeating and going silent one after another leave in the
// coordinator's HostRanks (coordinator/host_ranks.h): the registry forgets
// lost hosts to make room, so HostRanks must too, or each name ever lost
// stays, and every heartbeat looks at them all.
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/host_ranks.h"
#include "tests/catch.h"

namespace ckpt::coordinator {
namespace {

google::protobuf::RepeatedPtrField<v1::CarriedJob> Jobs(const std::string& job, uint32_t rank) {
  google::protobuf::RepeatedPtrField<v1::CarriedJob> jobs;
  v1::CarriedJob* carried = jobs.Add();
  carried->set_job(job);
  carried->set_world_size(1);
  carried->add_ranks(rank);
  return jobs;
}

TEST_CASE("lost hosts kept are bounded: the one lost longest ago goes first", "[host_ranks]") {
  HostRanks ranks;
  const size_t lost = HostRanks::kMaxLostHosts + 1;
  // Each host the only one of its own job, so no heartbeat ends its loss.
  for (size_t h = 0; h < lost; ++h) {
    const std::string host = absl::StrCat("h", h);
    ranks.Carries(host, Jobs(absl::StrCat("job", h), 0));
    ranks.Lost(host, "lost: no heartbeat");
  }
  CHECK_FALSE(ranks.LostFrom("job0", 1).has_value());  // forgotten
  CHECK(ranks.RanksOf("h0", "job0", 1).empty());
  for (size_t h = 1; h < lost; ++h) {
    std::optional<HostRanks::LostCarrier> carrier = ranks.LostFrom(absl::StrCat("job", h), 1);
    REQUIRE(carrier.has_value());
    CHECK(carrier->host == absl::StrCat("h", h));
  }
}

}  // namespace
}  // namespace ckpt::coordinator
