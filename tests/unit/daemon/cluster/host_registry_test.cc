// The coordinator's host registry, with time driven by the test.
#include "daemon/cluster/host_registry.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/catch.h"

namespace ckpt::cluster {
namespace {

v1::RegisterHostRequest Host(const std::string& name, const std::string& instance) {
  v1::RegisterHostRequest r;
  r.mutable_host()->set_host(name);
  r.mutable_host()->set_address("10.0.0.1:7471");
  r.set_instance(instance);
  r.set_pool_bytes(1 << 30);
  r.set_failure_domain("rack1");
  return r;
}

v1::HeartbeatRequest Beat(const std::string& name, const std::string& instance) {
  v1::HeartbeatRequest b;
  b.set_host(name);
  b.set_instance(instance);
  b.set_pool_used(4096);
  b.set_sessions(2);
  return b;
}

TEST_CASE("Hosts heartbeat, go lost when silent, and come back by registering", "[cluster]") {
  HostRegistry registry({.heartbeat_timeout = absl::Seconds(5), .max_hosts = 8});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  REQUIRE(registry.Register(Host("a", "i1"), t0).ok());
  REQUIRE(registry.Register(Host("b", "i1"), t0).ok());
  CHECK(registry.Heartbeat(Beat("a", "i1"), t0 + absl::Seconds(4)));
  // An unknown host or another instance of a known one: register again.
  CHECK(!registry.Heartbeat(Beat("c", "i1"), t0));
  CHECK(!registry.Heartbeat(Beat("a", "i2"), t0));

  // b silent past the timeout is lost, once; a is not.
  CHECK(registry.ExpireSilent(t0 + absl::Seconds(5)).empty());
  CHECK(registry.ExpireSilent(t0 + absl::Seconds(6)) == std::vector<std::string>{"b"});
  CHECK(registry.ExpireSilent(t0 + absl::Seconds(7)).empty());
  CHECK(registry.live_hosts() == 1);
  // A lost host's late heartbeat is not taken: it must register again.
  CHECK(!registry.Heartbeat(Beat("b", "i1"), t0 + absl::Seconds(7)));

  v1::ClusterStatusResponse status = registry.Status(t0 + absl::Seconds(7));
  REQUIRE(status.hosts_size() == 2);
  CHECK(status.hosts(0).host().host() == "a");
  CHECK(!status.hosts(0).lost());
  CHECK(status.hosts(0).heartbeat_age_s() == Approx(3.0));
  CHECK(status.hosts(0).pool_used() == 4096);
  CHECK(status.hosts(0).sessions() == 2);
  CHECK(status.hosts(1).lost());
  // Silent past the timeout reads as lost even before a sweep.
  CHECK(registry.Status(t0 + absl::Seconds(20)).hosts(0).lost());

  REQUIRE(registry.Register(Host("b", "i2"), t0 + absl::Seconds(8)).ok());
  CHECK(registry.live_hosts() == 2);
  CHECK(registry.Heartbeat(Beat("b", "i2"), t0 + absl::Seconds(9)));
}

TEST_CASE("A heartbeat's progress is kept bounded: 64 of each, valid jobs, short phases",
          "[cluster]") {
  HostRegistry registry({.heartbeat_timeout = absl::Seconds(5), .max_hosts = 8});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  REQUIRE(registry.Register(Host("a", "i1"), t0).ok());
  v1::HeartbeatRequest beat = Beat("a", "i1");
  v1::SaveProgress* bad = beat.add_saves();
  bad->set_job("../etc");
  for (int i = 0; i < 1000; ++i) {
    v1::SaveProgress* save = beat.add_saves();
    save->set_job(absl::StrCat("job", i));
    save->set_step(i);
    save->set_phase(std::string(10000, 'p'));
  }
  beat.add_loads()->set_job("loaded");
  beat.add_loads()->set_job(std::string(100000, 'j'));
  REQUIRE(registry.Heartbeat(beat, t0));
  const v1::ClusterHost host = registry.Status(t0).hosts(0);
  REQUIRE(host.saves_size() == 64);
  CHECK(host.saves(0).job() == "job0");  // the invalid one is dropped
  CHECK(host.saves(63).step() == 63);
  CHECK(host.saves(0).phase().size() == 64);
  REQUIRE(host.loads_size() == 1);
  CHECK(host.loads(0).job() == "loaded");
  // The next heartbeat replaces them.
  REQUIRE(registry.Heartbeat(Beat("a", "i1"), t0 + absl::Seconds(1)));
  CHECK(registry.Status(t0 + absl::Seconds(1)).hosts(0).saves_size() == 0);
}

TEST_CASE("Registration is bounded and checked before anything is kept", "[cluster]") {
  HostRegistry registry({.heartbeat_timeout = absl::Seconds(5), .max_hosts = 2});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  CHECK(registry.Register(Host("", "i"), t0).code() == absl::StatusCode::kInvalidArgument);
  CHECK(registry.Register(Host("../etc", "i"), t0).code() == absl::StatusCode::kInvalidArgument);
  CHECK(registry.Register(Host(std::string(100000, 'h'), "i"), t0).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(registry.Register(Host("a", ""), t0).code() == absl::StatusCode::kInvalidArgument);
  v1::RegisterHostRequest long_address = Host("a", "i");
  long_address.mutable_host()->set_address(std::string(1 << 20, ':'));
  CHECK(registry.Register(long_address, t0).code() == absl::StatusCode::kInvalidArgument);
  v1::RegisterHostRequest bad_domain = Host("a", "i");
  bad_domain.set_failure_domain("a/b");
  CHECK(registry.Register(bad_domain, t0).code() == absl::StatusCode::kInvalidArgument);
  CHECK(registry.Status(t0).hosts_size() == 0);

  REQUIRE(registry.Register(Host("a", "i"), t0).ok());
  REQUIRE(registry.Register(Host("b", "i"), t0).ok());
  const absl::Status full = registry.Register(Host("c", "i"), t0);
  CHECK(full.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(full.message()), Catch::Contains("the limit is 2"));
  // A known instance may always register again.
  CHECK(registry.Register(Host("a", "i"), t0).ok());
  // Once b is silent past the timeout, a new host takes its place.
  CHECK(registry.Heartbeat(Beat("a", "i"), t0 + absl::Seconds(4)));
  REQUIRE(registry.Register(Host("c", "i"), t0 + absl::Seconds(6)).ok());
  v1::ClusterStatusResponse status = registry.Status(t0 + absl::Seconds(6));
  REQUIRE(status.hosts_size() == 2);
  CHECK(status.hosts(0).host().host() == "a");
  CHECK(status.hosts(1).host().host() == "c");
}

TEST_CASE("A second daemon under a live host's name is refused until that one goes silent",
          "[cluster]") {
  HostRegistry registry({.heartbeat_timeout = absl::Seconds(5), .max_hosts = 8});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  REQUIRE(registry.Register(Host("a", "first"), t0).ok());
  const absl::Status twin = registry.Register(Host("a", "second"), t0 + absl::Seconds(1));
  CHECK(twin.code() == absl::StatusCode::kAlreadyExists);
  CHECK_THAT(std::string(twin.message()),
             Catch::Contains("instance first") && Catch::Contains("its own --host_name"));
  // The first keeps heartbeating, undisturbed.
  CHECK(registry.Heartbeat(Beat("a", "first"), t0 + absl::Seconds(2)));
  // Silent past the timeout (a crashed daemon whose replacement starts):
  // the name passes to the new instance, and the old one must register.
  REQUIRE(registry.Register(Host("a", "second"), t0 + absl::Seconds(8)).ok());
  CHECK(!registry.Heartbeat(Beat("a", "first"), t0 + absl::Seconds(8)));
  CHECK(registry.Heartbeat(Beat("a", "second"), t0 + absl::Seconds(9)));
}

}  // namespace
}  // namespace ckpt::cluster
