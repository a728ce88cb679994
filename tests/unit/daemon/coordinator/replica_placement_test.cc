// Where a memory-tier save's replicas go (replica_placement.h): each
// host's files to the R hosts after it in a ring by name, each sender's
// list the same at both ends, and clear refusals.
#include "daemon/coordinator/replica_placement.h"

#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"

namespace ckpt::coordinator {
namespace {

using Parts = std::map<std::string, std::shared_ptr<const v1::HostAssignment>>;

// A host writing two files: items end at 1000 and 5000 in file 0, 300 in 1.
std::shared_ptr<const v1::HostAssignment> Part(const std::string& host) {
  auto part = std::make_shared<v1::HostAssignment>();
  part->mutable_host()->set_host(host);
  const std::string f0 = "data/" + host + "-0.bin", f1 = "data/" + host + "-1.bin";
  part->add_files(f0);
  part->add_files(f1);
  auto item = [&](const std::string& file, uint64_t offset, uint64_t bytes) {
    v1::WriteItem* w = part->add_items();
    w->set_file(file);
    w->set_file_offset(offset);
    w->set_bytes(bytes);
  };
  item(f0, 4096, 904);
  item(f0, 0, 5000);
  item(f1, 0, 300);
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

}  // namespace
}  // namespace ckpt::coordinator
