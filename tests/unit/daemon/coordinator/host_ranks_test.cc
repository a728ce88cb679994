// The ranks hosts carry and those a lost host carried
// (coordinator/host_ranks.h): what makes a save or load fail at once,
// naming the lost host, instead of waiting for ranks that cannot come.
#include "daemon/coordinator/host_ranks.h"

#include <string>
#include <vector>

#include "tests/catch.h"

namespace ckpt::coordinator {
namespace {

google::protobuf::RepeatedPtrField<v1::CarriedJob> Jobs(const std::string& job, uint32_t world,
                                                        const std::vector<uint32_t>& ranks) {
  google::protobuf::RepeatedPtrField<v1::CarriedJob> jobs;
  v1::CarriedJob* carried = jobs.Add();
  carried->set_job(job);
  carried->set_world_size(world);
  for (uint32_t r : ranks) carried->add_ranks(r);
  return jobs;
}

TEST_CASE("a lost host's ranks are lost for its job and world only", "[host_ranks]") {
  HostRanks ranks;
  ranks.Carries("h0", Jobs("job", 8, {0, 1, 2}));
  ranks.Carries("h2", Jobs("job", 8, {7, 6}));
  CHECK_FALSE(ranks.LostFrom("job", 8).has_value());  // alive: nothing lost
  CHECK(ranks.RanksOf("h2", "job", 8) == std::vector<int>{6, 7});
  ranks.Lost("h2", "lost: no heartbeat for 1.5s");
  std::optional<HostRanks::LostCarrier> lost = ranks.LostFrom("job", 8);
  REQUIRE(lost.has_value());
  CHECK(lost->host == "h2");
  CHECK(lost->ranks == std::vector<int>{6, 7});
  CHECK_FALSE(ranks.LostFrom("job", 16).has_value());   // another world
  CHECK_FALSE(ranks.LostFrom("other", 8).has_value());  // another job
  // A host bringing those ranks itself is not waiting for them.
  CHECK_FALSE(ranks.LostFrom("job", 8, std::vector<int>{6, 7}).has_value());
  const absl::Status why = HostRanks::LostError(lost->host, lost->ranks, 8, lost->reason);
  CHECK(absl::IsUnavailable(why));
  CHECK(why.message() == "host h2 (ranks 6, 7 of 8 carried there) lost: no heartbeat for 1.5s");
}

TEST_CASE("lost ranks end when the host registers or another host carries them", "[host_ranks]") {
  HostRanks ranks;
  ranks.Carries("h2", Jobs("job", 8, {6, 7}));
  ranks.Lost("h2", "lost");
  ranks.Carries("h1", Jobs("job", 8, {6}));  // the job went on without h2
  std::optional<HostRanks::LostCarrier> lost = ranks.LostFrom("job", 8);
  REQUIRE(lost.has_value());
  CHECK(lost->ranks == std::vector<int>{7});
  ranks.Carries("h1", Jobs("job", 8, {6, 7}));
  CHECK_FALSE(ranks.LostFrom("job", 8).has_value());

  ranks.Carries("h3", Jobs("job", 8, {5}));
  ranks.Lost("h3", "lost");
  REQUIRE(ranks.LostFrom("job", 8).has_value());
  ranks.Registered("h3");
  CHECK_FALSE(ranks.LostFrom("job", 8).has_value());
}

TEST_CASE("what a heartbeat carries is checked and bounded", "[host_ranks]") {
  HostRanks ranks;
  google::protobuf::RepeatedPtrField<v1::CarriedJob> jobs = Jobs("../bad", 8, {1});
  *jobs.Add() = Jobs("job", 4, {1, 9, 1, 3})[0];  // 9 is beyond the world; 1 twice
  *jobs.Add() = Jobs("zero", 0, {0})[0];
  ranks.Carries("h0", jobs);
  CHECK(ranks.RanksOf("h0", "job", 4) == std::vector<int>{1, 3});
  CHECK(ranks.RanksOf("h0", "../bad", 8).empty());
  CHECK(ranks.RanksOf("h0", "zero", 0).empty());

  std::vector<uint32_t> many(HostRanks::kMaxRanks + 100);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<uint32_t>(i);
  ranks.Carries("h1", Jobs("big", 1 << 20, many));
  CHECK(ranks.RanksOf("h1", "big", 1 << 20).size() == HostRanks::kMaxRanks);
  // A long list is named in part.
  const absl::Status why =
      HostRanks::LostError("h1", ranks.RanksOf("h1", "big", 1 << 20), 1 << 20, "lost");
  CHECK(why.message().find("and 4080 more") != absl::string_view::npos);
}

}  // namespace
}  // namespace ckpt::coordinator
