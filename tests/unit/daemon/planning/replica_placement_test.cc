// Where a memory-tier save's replicas go (replica_placement.h): each
// host's files to the R hosts after it in a ring by name, each sender's
// list the same at both ends, and clear refusals.
#include "daemon/planning/replica_placement.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/match.h"
#include "tests/catch.h"

namespace ckpt::planning {
namespace {

using Parts = std::map<std::string, std::shared_ptr<const v1::HostAssignment>>;

// A host writing two files: items end at 1000 and 5000 in file 0, 300 in 1.
std::shared_ptr<const v1::HostAssignment> Part(const std::string& host) {
  auto part = std::make_shared<v1::HostAssignment>();
  part->mutable_host()->set_host(host);
  const std::string f0 = "data/" + host + "-0.bin", f1 = "data/" + host + "-1.bin";
  part->add_files(f0);
  part->add_files(f1);
  auto item = [&](int writer, uint64_t offset, uint64_t bytes) {
    v1::WriteItem* w = part->add_items();
    w->set_writer(writer);
    w->set_file_offset(offset);
    w->set_bytes(bytes);
  };
  item(0, 4096, 904);
  item(0, 0, 5000);
  item(1, 0, 300);
  return part;
}

const std::map<std::string, std::string> kAddresses = {{"h0", "a:0"}, {"h1", "a:1"}, {"h2", "a:2"}};

TEST_CASE("replicas go to the next hosts in a ring, files and sizes alike at both ends",
          "[replica_placement]") {
  const Parts parts = {{"h2", Part("h2")}, {"h0", Part("h0")}, {"h1", Part("h1")}};
  for (int replicas : {1, 2}) {
    INFO(replicas << " replicas");
    auto plans = PlaceReplicas(parts, kAddresses, replicas, 77, std::string(16, 'k'));
    REQUIRE(plans.ok());
    REQUIRE(plans->size() == 3);
    const std::vector<std::string> hosts = {"h0", "h1", "h2"};
    for (int i = 0; i < 3; ++i) {
      const v1::ReplicaPlan& p = plans->at(hosts[i]);
      CHECK(p.index() == static_cast<uint32_t>(i));
      CHECK(p.replica_id() == 77);
      CHECK(p.piece_bytes() == kReplicaPieceBytes);
      REQUIRE(p.send_to_size() == replicas);
      REQUIRE(p.receive_from_size() == replicas);
      for (int k = 0; k < replicas; ++k) {
        const v1::ReplicaPeer& to = p.send_to(k);
        CHECK(to.host() == hosts[(i + k + 1) % 3]);
        CHECK(to.address() == kAddresses.at(to.host()));
        CHECK(to.index() == static_cast<uint32_t>((i + k + 1) % 3));
        REQUIRE(to.files_size() == 2);
        CHECK(to.files(0).name() == "data/" + hosts[i] + "-0.bin");
        CHECK(to.files(0).bytes() == 5000);
        CHECK(to.files(1).bytes() == 300);
        // The receiver lists the same files from this sender.
        const v1::ReplicaPlan& theirs = plans->at(to.host());
        bool found = false;
        for (const v1::ReplicaPeer& from : theirs.receive_from()) {
          if (from.host() != hosts[i]) continue;
          found = true;
          CHECK(from.index() == static_cast<uint32_t>(i));
          REQUIRE(from.files_size() == 2);
          CHECK(from.files(0).name() == to.files(0).name());
          CHECK(from.files(1).bytes() == to.files(1).bytes());
        }
        CHECK(found);
      }
    }
  }
}

TEST_CASE("replicas: more copies than other hosts, or a host without a channel, is refused",
          "[replica_placement]") {
  const Parts parts = {{"h0", Part("h0")}, {"h1", Part("h1")}};
  auto too_many = PlaceReplicas(parts, kAddresses, 2, 1, std::string(16, 'k'));
  REQUIRE(absl::IsFailedPrecondition(too_many.status()));
  CHECK(absl::StrContains(too_many.status().message(), "--memory_tier_replicas"));
  auto no_channel = PlaceReplicas(parts, {{"h0", "a:0"}}, 1, 1, std::string(16, 'k'));
  REQUIRE(absl::IsFailedPrecondition(no_channel.status()));
  CHECK(absl::StrContains(no_channel.status().message(), "host h1"));
  // No replicas: nothing to send or receive.
  auto none = PlaceReplicas(parts, {}, 0, 1, std::string(16, 'k'));
  REQUIRE(none.ok());
  CHECK(none->at("h0").send_to_size() == 0);
}

// The concatenated bytes of a host's files (Part): 5000 + 300.
constexpr uint64_t kHostBytes = 5300;

TEST_CASE("erasure stripes: each host's data in k stripes, parity in m, any m hosts lost",
          "[replica_placement]") {
  const std::map<std::string, std::string> addresses = {
      {"h0", "a:0"}, {"h1", "a:1"}, {"h2", "a:2"}, {"h3", "a:3"}, {"h4", "a:4"}, {"h5", "a:5"}};
  for (auto [k, m, n] : {std::tuple{2, 1, 3}, std::tuple{2, 1, 6}, std::tuple{3, 2, 5}}) {
    INFO("k=" << k << " m=" << m << " on " << n << " hosts");
    Parts parts;
    for (int i = 0; i < n; ++i) parts["h" + std::to_string(i)] = Part("h" + std::to_string(i));
    absl::StatusOr<ErasurePlacement> placed =
        PlaceErasure(parts, addresses, k, m, 9, std::string(16, 's'));
    REQUIRE(placed.ok());
    const v1::ErasurePlan& whole = placed->whole;
    REQUIRE(whole.stripes_size() == n);  // k shares per host, k per stripe
    std::map<std::string, int> data, parity;
    std::map<std::string, uint64_t> covered;  // bytes of each host's data in stripes
    for (const v1::ErasureStripe& stripe : whole.stripes()) {
      REQUIRE(stripe.shares_size() == k + m);
      std::set<std::string> hosts;
      for (int i = 0; i < k + m; ++i) {
        const v1::ErasureShare& share = stripe.shares(i);
        hosts.insert(share.host());
        CHECK(share.bytes() <= stripe.unit_bytes());
        if (i < k) {
          ++data[share.host()];
          covered[share.host()] += share.bytes();
        } else {
          ++parity[share.host()];
          CHECK(share.files(0).name() == ParityFileName(stripe.number(), i - k));
        }
      }
      // Every share on another host: losing any m hosts loses at most m
      // shares of the stripe, which its m parity shares rebuild.
      CHECK(hosts.size() == static_cast<size_t>(k + m));
    }
    for (const auto& [host, part] : parts) {
      CHECK(data[host] == k);
      CHECK(parity[host] == m);
      CHECK(covered[host] == kHostBytes);  // the shares cover the host's data, once
      // Each host's own plan has the stripes it is in.
      CHECK(placed->hosts.at(host).stripes_size() == k + m);
    }
  }
  absl::StatusOr<ErasurePlacement> uneven = PlaceErasure({{"h0", Part("h0")}, {"h1", Part("h1")}},
                                                         addresses, 2, 1, 9, std::string(16, 's'));
  REQUIRE(absl::IsFailedPrecondition(uneven.status()));
  CHECK(absl::StrContains(uneven.status().message(), "--memory_tier_erasure"));
}

// Six hosts, two per rack; by name, racks would sit side by side in the
// ring (h0 h1 in r0, ...).
Parts RackedParts() {
  Parts parts;
  for (int i = 0; i < 6; ++i) {
    auto part = std::make_shared<v1::HostAssignment>(*Part("h" + std::to_string(i)));
    part->mutable_host()->set_failure_domain("r" + std::to_string(i / 2));
    parts["h" + std::to_string(i)] = part;
  }
  return parts;
}

std::string RackOf(const std::string& host) { return "r" + std::to_string((host[1] - '0') / 2); }

TEST_CASE("failure domains: a host's copies and an erasure group's shares in other racks",
          "[replica_placement]") {
  const Parts parts = RackedParts();
  const std::map<std::string, std::string> addresses = {
      {"h0", "a:0"}, {"h1", "a:1"}, {"h2", "a:2"}, {"h3", "a:3"}, {"h4", "a:4"}, {"h5", "a:5"}};
  for (int replicas : {1, 2}) {
    INFO(replicas << " replicas");
    auto plans = PlaceReplicas(parts, addresses, replicas, 1, std::string(16, 'k'));
    REQUIRE(plans.ok());
    std::map<std::string, int> received;
    for (const auto& [host, plan] : *plans) {
      REQUIRE(plan.send_to_size() == replicas);
      std::set<std::string> racks = {RackOf(host)};
      for (const v1::ReplicaPeer& to : plan.send_to()) {
        ++received[to.host()];
        racks.insert(RackOf(to.host()));
      }
      // Copies in racks of their own: a rack lost keeps a copy elsewhere.
      CHECK(racks.size() == static_cast<size_t>(replicas + 1));
    }
    for (const auto& [host, n] : received) CHECK(n == replicas);  // still balanced
  }
  // Erasure 2+1 over three racks: a whole rack lost is one share per stripe.
  absl::StatusOr<ErasurePlacement> placed =
      PlaceErasure(parts, addresses, 2, 1, 9, std::string(16, 's'));
  REQUIRE(placed.ok());
  for (const v1::ErasureStripe& stripe : placed->whole.stripes()) {
    std::set<std::string> racks;
    for (const v1::ErasureShare& share : stripe.shares()) racks.insert(RackOf(share.host()));
    CHECK(racks.size() == 3);
  }
  for (const std::string rack : {"r0", "r1", "r2"}) {
    INFO("rack " << rack << " lost");
    FileHolders holders;
    std::set<std::string> alive;
    for (const v1::ErasureStripe& stripe : placed->whole.stripes()) {
      for (const v1::ErasureShare& share : stripe.shares()) {
        if (RackOf(share.host()) == rack) continue;
        alive.insert(share.host());
        for (const v1::ReplicaFile& f : share.files()) holders[f.name()].insert(share.host());
      }
    }
    CHECK(PlanRebuild(placed->whole, alive, holders).ok());
  }
}

TEST_CASE("failure domains of uneven sizes: no host followed by one of its rack",
          "[replica_placement]") {
  // Racks of 4, 2 and 2 hosts.
  const std::map<std::string, std::string> racks = {{"h0", "a"}, {"h1", "a"}, {"h2", "a"},
                                                    {"h3", "a"}, {"h4", "b"}, {"h5", "b"},
                                                    {"h6", "c"}, {"h7", "c"}};
  Parts parts;
  std::map<std::string, std::string> addresses;
  for (const auto& [host, rack] : racks) {
    auto part = std::make_shared<v1::HostAssignment>(*Part(host));
    part->mutable_host()->set_failure_domain(rack);
    parts[host] = part;
    addresses[host] = "a:" + host;
  }
  auto plans = PlaceReplicas(parts, addresses, 1, 1, std::string(16, 'k'));
  REQUIRE(plans.ok());
  for (const auto& [host, plan] : *plans) {
    INFO(host << " sends to " << plan.send_to(0).host());
    CHECK(racks.at(plan.send_to(0).host()) != racks.at(host));
  }
}

TEST_CASE("rebuild: a lost host's shares rebuilt from k survivors, by its replacement",
          "[replica_placement]") {
  const Parts parts = {{"h0", Part("h0")}, {"h1", Part("h1")}, {"h2", Part("h2")}};
  absl::StatusOr<ErasurePlacement> placed =
      PlaceErasure(parts, kAddresses, 2, 1, 9, std::string(16, 's'));
  REQUIRE(placed.ok());
  // What each host holds: its data files and its parity files.
  auto holders_without = [&](const std::set<std::string>& lost) {
    FileHolders holders;
    for (const v1::ErasureStripe& stripe : placed->whole.stripes()) {
      for (const v1::ErasureShare& share : stripe.shares()) {
        if (lost.count(share.host()) > 0) continue;
        for (const v1::ReplicaFile& f : share.files()) holders[f.name()].insert(share.host());
      }
    }
    return holders;
  };
  SECTION("the replacement takes part: it rebuilds its own") {
    FileHolders holders = holders_without({"h1"});
    absl::StatusOr<v1::ErasureRebuild> rebuild =
        PlanRebuild(placed->whole, {"h0", "h1", "h2"}, holders);
    REQUIRE(rebuild.ok());
    REQUIRE(rebuild->stripes_size() == 2);  // h1's two data shares
    for (const v1::StripeRebuild& sr : rebuild->stripes()) {
      CHECK(sr.rebuilder() == "h1");
      REQUIRE(sr.lost_size() == 1);
      CHECK(sr.stripe().shares(sr.lost(0)).host() == "h1");
      REQUIRE(sr.sources_size() == 2);
      for (uint32_t i : sr.sources()) CHECK(sr.stripe().shares(i).host() != "h1");
    }
    CHECK(holders.at("data/h1-0.bin").count("h1") == 1);
    CHECK(holders.at("data/h1-1.bin").count("h1") == 1);
  }
  SECTION("without it: the host holding the fewest files rebuilds") {
    FileHolders holders = holders_without({"h1"});
    absl::StatusOr<v1::ErasureRebuild> rebuild = PlanRebuild(placed->whole, {"h0", "h2"}, holders);
    REQUIRE(rebuild.ok());
    REQUIRE(rebuild->stripes_size() == 2);
    const std::string by = rebuild->stripes(0).rebuilder();
    CHECK((by == "h0" || by == "h2"));
    CHECK(rebuild->stripes(1).rebuilder() == by);  // one host rebuilds all of h1
  }
  SECTION("two hosts lost: more than one parity share can rebuild") {
    FileHolders holders = holders_without({"h0", "h1"});
    absl::StatusOr<v1::ErasureRebuild> rebuild =
        PlanRebuild(placed->whole, {"h0", "h1", "h2"}, holders);
    REQUIRE(absl::IsUnavailable(rebuild.status()));
    CHECK(absl::StrContains(rebuild.status().message(), "more shares than its 1 parity"));
  }
  SECTION("nothing lost: nothing to rebuild") {
    FileHolders holders = holders_without({});
    absl::StatusOr<v1::ErasureRebuild> rebuild =
        PlanRebuild(placed->whole, {"h0", "h1", "h2"}, holders);
    REQUIRE(rebuild.ok());
    CHECK(rebuild->stripes_size() == 0);
  }
}

}  // namespace
}  // namespace ckpt::planning
