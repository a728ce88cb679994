// A job spread over hosts (docs/design.md §4): three node daemons and a
// coordinator daemon, each a real ckptd process on one shared storage root;
// eight rank processes attach to their own host's daemon. They save one
// checkpoint of a transformer sharded TP=2 x PP=2 x DP=2 (weights
// replicated over DP, optimizer state in FSDP flat ranges) that every host
// writes part of; it loads resharded into six ranks on two hosts as
// TP=3 x DP=2 and into one rank on one host as a full copy, every byte
// checked (inside ckpt-demo-rank).
#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/test_cluster.h"

namespace ckpt::testing {
namespace {

constexpr int kScale = 2;
const std::vector<int> kSaveHosts = {3, 3, 2};  // ranks per host: 8 in all
constexpr int kSaveWorld = 8;
const std::vector<std::string> kSaveLayout = {"--layout=parallel", "--tp=2", "--pp=2"};
const std::vector<std::string> kLoadLayout = {"--layout=parallel", "--tp=3", "--pp=1"};
const std::vector<std::string> kFullCopy = {"--layout=parallel", "--tp=1", "--pp=1"};

// The stored chunks a load by `ranks` needs, each once: every tensor's (the
// layouts load whole models) and the objects those ranks ask for (the
// global ones, and each rank's own).
uint64_t NeededChunkBytes(const v1::CheckpointManifest& manifest, const std::set<int>& ranks) {
  std::set<std::tuple<std::string, uint64_t, uint64_t>> chunks;
  for (const v1::TensorEntry& t : manifest.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) {
        chunks.emplace(c.file(), c.file_offset(), c.length());
      }
    }
  }
  for (const v1::ObjectEntry& o : manifest.objects()) {
    if (o.rank() >= 0 && ranks.count(o.rank()) == 0) continue;
    chunks.emplace(o.chunk().file(), o.chunk().file_offset(), o.chunk().length());
  }
  uint64_t bytes = 0;
  for (const auto& c : chunks) bytes += std::get<2>(c);
  return bytes;
}

struct HostTraffic {
  uint64_t chunk_bytes_read = 0;
  uint64_t peer_sent = 0;
  uint64_t peer_received = 0;
};

std::vector<HostTraffic> TrafficPerHost(TestCluster& cluster) {
  std::vector<HostTraffic> out;
  for (int i = 0; i < cluster.hosts(); ++i) {
    const v1::GetStatusResponse s = cluster.node(i).Status();
    out.push_back({s.chunk_bytes_read(), s.peer_bytes_sent(), s.peer_bytes_received()});
  }
  return out;
}

std::vector<uint64_t> WrittenPerHost(TestCluster& cluster) {
  std::vector<uint64_t> out;
  for (int i = 0; i < cluster.hosts(); ++i) {
    out.push_back(cluster.node(i).Status().storage_bytes_written());
  }
  return out;
}

TEST_CASE("A job on three hosts saves one checkpoint and loads resharded on two", "[multi_host]") {
  TestCluster cluster;
  const absl::Status started = cluster.Start(3);
  INFO(started.ToString());
  REQUIRE(started.ok());
  const std::vector<uint64_t> before = WrittenPerHost(cluster);
  RequireAllOk(cluster.RunRanks("llm", "save", kSaveHosts, 1, 0, kScale, kSaveLayout));

  // One checkpoint, committed once, found by the coordinator and every node.
  CHECK(ListedSteps(cluster.coordinator(), "llm") == std::vector<int64_t>{1});
  for (int i = 0; i < cluster.hosts(); ++i) {
    CHECK(ListedSteps(cluster.node(i), "llm") == std::vector<int64_t>{1});
  }
  const v1::CheckpointManifest manifest = InspectManifest(cluster.coordinator(), "llm", 1);
  CHECK(manifest.topology().world_size() == kSaveWorld);
  std::set<std::string> topology_hosts;
  for (const v1::HostIdentity& h : manifest.topology().hosts()) topology_hosts.insert(h.host());
  CHECK(topology_hosts == std::set<std::string>{"h0", "h1", "h2"});
  // The manifest says which host wrote each file: every host wrote some.
  std::set<std::string> writers;
  for (const v1::TensorEntry& t : manifest.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) {
        writers.insert(c.file().substr(0, c.file().find('-')));
      }
    }
  }
  CHECK(writers == std::set<std::string>{"data/h0", "data/h1", "data/h2"});

  // Replicas written once: the hosts together wrote the checkpoint's bytes,
  // no more; and about evenly (the replicas let the planner even out host
  // h2, which has two ranks to the others' three).
  const std::vector<uint64_t> after = WrittenPerHost(cluster);
  uint64_t total = 0;
  std::vector<uint64_t> per_host;
  for (size_t i = 0; i < after.size(); ++i) {
    per_host.push_back(after[i] - before[i]);
    total += per_host.back();
  }
  INFO("bytes written per host: " << per_host[0] << ", " << per_host[1] << ", " << per_host[2]);
  CHECK(total == CheckpointBytes(cluster.coordinator(), "llm", 1));
  const auto [least, most] = std::minmax_element(per_host.begin(), per_host.end());
  CHECK(*most <= *least + *least / 10);

  // Six ranks on two hosts as TP=3 x DP=2 (every rank checks every byte it
  // got). Each stored chunk the load needs is read from storage by one
  // host, once, and forwarded to the other where that one needs it too.
  const uint64_t needed = NeededChunkBytes(manifest, {0, 1, 2, 3, 4, 5});
  const std::vector<HostTraffic> t0 = TrafficPerHost(cluster);
  RequireAllOk(cluster.RunRanks("llm", "load", {3, 3}, -1, kSaveWorld, kScale, kLoadLayout));
  const std::vector<HostTraffic> t1 = TrafficPerHost(cluster);
  std::vector<HostTraffic> d(3);
  for (int i = 0; i < 3; ++i) {
    d[i] = {t1[i].chunk_bytes_read - t0[i].chunk_bytes_read, t1[i].peer_sent - t0[i].peer_sent,
            t1[i].peer_received - t0[i].peer_received};
  }
  INFO("chunk bytes read: h0 " << d[0].chunk_bytes_read << ", h1 " << d[1].chunk_bytes_read
                               << "; needed " << needed << "; forwarded h0->h1 " << d[0].peer_sent
                               << ", h1->h0 " << d[1].peer_sent);
  CHECK(d[0].chunk_bytes_read + d[1].chunk_bytes_read == needed);
  CHECK(d[2].chunk_bytes_read == 0);
  // Each host had what its ranks need: what it read and what it received.
  CHECK(d[0].chunk_bytes_read + d[0].peer_received == NeededChunkBytes(manifest, {0, 1, 2}));
  CHECK(d[1].chunk_bytes_read + d[1].peer_received == NeededChunkBytes(manifest, {3, 4, 5}));
  CHECK(d[1].peer_received == d[0].peer_sent);
  CHECK(d[0].peer_received == d[1].peer_sent);
  // Balanced by bytes: neither host reads much more than half.
  CHECK(std::max(d[0].chunk_bytes_read, d[1].chunk_bytes_read) <= needed / 2 + needed / 10);

  // One rank, a full copy: its host reads every chunk it needs once.
  RequireAllOk(cluster.RunRanks("llm", "load", {0, 0, 1}, 1, kSaveWorld, kScale, kFullCopy));
  CHECK(TrafficPerHost(cluster)[2].chunk_bytes_read - t1[2].chunk_bytes_read ==
        NeededChunkBytes(manifest, {0}));

  // The next step of the same layout saves too.
  RequireAllOk(cluster.RunRanks("llm", "save", kSaveHosts, 2, 0, kScale, kSaveLayout));
  CHECK(ListedSteps(cluster.coordinator(), "llm") == std::vector<int64_t>{1, 2});
}

TEST_CASE("A load spread over hosts streams through pools smaller than its part", "[multi_host]") {
  // 1 MiB pools, 128 KiB groups: each host's part of the load (about
  // 3.5 MB needed on each) goes through its pool several times over, with
  // rooms filled in the global group order on both hosts.
  TestCluster cluster;
  REQUIRE(cluster.Start(3, {"--pool_bytes=1048576", "--batch_bytes=131072"}).ok());
  REQUIRE(cluster.node(0).Status().pool_bytes() == 1048576);
  RequireAllOk(cluster.RunRanks("llm", "save", kSaveHosts, 1, 0, kScale, kSaveLayout));
  const v1::CheckpointManifest manifest = InspectManifest(cluster.coordinator(), "llm", 1);
  const std::vector<HostTraffic> before = TrafficPerHost(cluster);
  RequireAllOk(cluster.RunRanks("llm", "load", {3, 3}, -1, kSaveWorld, kScale, kLoadLayout));
  const std::vector<HostTraffic> after = TrafficPerHost(cluster);
  CHECK(after[0].chunk_bytes_read - before[0].chunk_bytes_read + after[1].chunk_bytes_read -
            before[1].chunk_bytes_read ==
        NeededChunkBytes(manifest, {0, 1, 2, 3, 4, 5}));
  CHECK(after[0].peer_sent > before[0].peer_sent);
  CHECK(after[1].peer_sent > before[1].peer_sent);
}

TEST_CASE("An unchanged layout skips the planning barrier; a changed one plans afresh",
          "[multi_host]") {
  TestCluster cluster;
  REQUIRE(cluster.Start(3).ok());
  RequireAllOk(cluster.RunRanks("job", "save", kSaveHosts, 1));
  CHECK(cluster.Status().plan_barrier_skips() == 0);
  // The same shards on the same hosts: the first two hosts to arrive go on
  // at once, the last one completes the gathering as before.
  RequireAllOk(cluster.RunRanks("job", "save", kSaveHosts, 2));
  CHECK(cluster.Status().plan_barrier_skips() == 2);
  RequireAllOk(cluster.RunRanks("job", "save", kSaveHosts, 3));
  CHECK(cluster.Status().plan_barrier_skips() == 4);
  // Ranks spread otherwise: every host's plan differs, no host skips.
  const std::vector<int> moved = {2, 3, 3};
  RequireAllOk(cluster.RunRanks("job", "save", moved, 4));
  CHECK(cluster.Status().plan_barrier_skips() == 4);
  RequireAllOk(cluster.RunRanks("job", "save", moved, 5));
  CHECK(cluster.Status().plan_barrier_skips() == 6);
  CHECK(ListedSteps(cluster.coordinator(), "job") == std::vector<int64_t>{1, 2, 3, 4, 5});
  RequireAllOk(cluster.RunRanks("job", "load", {4, 4}, -1, kSaveWorld));
}

TEST_CASE("A job spread over hosts needs its daemons in a cluster", "[multi_host]") {
  TestDaemon lone;
  REQUIRE(lone.Start().ok());
  std::vector<std::unique_ptr<Subprocess>> ranks;
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({DemoRankPath(), "--socket=" + lone.socket(), "--job=j", "--mode=save",
                         "--rank=0", "--world=2", "--local_world=1", "--step=1"});
  REQUIRE(p.ok());
  const ExitInfo rank = (*p)->Wait();
  INFO(rank.output);
  CHECK(!rank.ok());
  CHECK(absl::StrContains(rank.output, "--coordinator_address"));
  CHECK(lone.Status().saves_size() == 0);
}

}  // namespace
}  // namespace ckpt::testing
