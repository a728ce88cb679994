// The memory tier of a job spread over hosts (docs/design.md §8): a coordinator
// and three node daemons, each a real ckptd process, eight rank processes.
// Each host keeps its part of a memory-tier save in its own memory and a
// replica of the host before it (R=1, a ring by name); the commit waits for
// every copy. A host whose daemon is SIGKILLed and started again (its
// memory empty) restores its ranks from its peers' copies over the peer
// data channel, and no host reads storage: every byte checked in the
// ranks (ckpt-demo-rank), the counters of every host compared.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/catch.h"
#include "tests/support/test_cluster.h"

namespace ckpt::testing {
namespace {

constexpr int kScale = 2;
const std::vector<int> kHosts = {3, 3, 2};  // ranks per host: 8 in all
constexpr int kWorld = 8;
const std::vector<std::string> kNodeFlags = {"--memory_tier_bytes=268435456"};
const std::vector<std::string> kCoordinatorFlags = {"--memory_tier_bytes=67108864",
                                                    "--memory_tier_replicas=1"};

std::vector<std::string> Layout(int tp, int pp, const std::string& tier_flag) {
  return {"--layout=parallel", absl::StrCat("--tp=", tp), absl::StrCat("--pp=", pp), tier_flag};
}

struct HostCounters {
  uint64_t storage_written = 0;
  uint64_t storage_read = 0;  // chunk bytes read from storage
  uint64_t memory_read = 0;
  uint64_t memory_in_place = 0;  // of memory_read: verified and sent or copied where it lies
  uint64_t peer_sent = 0;
  uint64_t peer_received = 0;
  uint64_t memory_held = 0;
  uint64_t early_checks = 0;  // loads that found the held step checked as their ranks attached
};

std::vector<HostCounters> Counters(TestCluster& cluster) {
  std::vector<HostCounters> out;
  for (int i = 0; i < cluster.hosts(); ++i) {
    const v1::GetStatusResponse s = cluster.node(i).Status();
    out.push_back({s.storage_bytes_written(), s.chunk_bytes_read(), s.memory_bytes_read(),
                   s.memory_bytes_in_place(), s.peer_bytes_sent(), s.peer_bytes_received(),
                   s.memory_tier_bytes(), s.memory_checks_early()});
  }
  return out;
}

void RequireAllSay(const std::vector<ExitInfo>& ranks, const std::string& what) {
  for (const ExitInfo& r : ranks) {
    INFO(r.output);
    CHECK(absl::StrContains(r.output, what));
  }
}

// Where a rank's load came from, as ckpt-demo-rank prints it ("load
// sources=kind@host:bytes,... delivered_bytes=N expected_bytes=M"): bytes by
// "kind@host".
struct RankSources {
  std::map<std::string, uint64_t> bytes;
  uint64_t delivered = 0;
  uint64_t expected = 0;
};

uint64_t NumberAfter(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return 0;
  uint64_t n = 0;
  const std::string digits = text.substr(
      at + key.size(), text.find_first_not_of("0123456789", at + key.size()) - (at + key.size()));
  return absl::SimpleAtoi(digits, &n) ? n : 0;
}

RankSources SourcesOf(const ExitInfo& rank) {
  RankSources out;
  const std::string key = "load sources=";
  const size_t at = rank.output.find(key);
  if (at == std::string::npos) return out;
  const std::string line = rank.output.substr(at, rank.output.find('\n', at) - at);
  const std::string list = line.substr(key.size(), line.find(' ', key.size()) - key.size());
  for (absl::string_view entry : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const size_t colon = entry.rfind(':');
    uint64_t n = 0;
    if (colon != absl::string_view::npos && absl::SimpleAtoi(entry.substr(colon + 1), &n)) {
      out.bytes[std::string(entry.substr(0, colon))] += n;
    }
  }
  out.delivered = NumberAfter(line, "delivered_bytes=");
  out.expected = NumberAfter(line, "expected_bytes=");
  return out;
}

// Every rank's sources add up to the bytes it loaded (its tensors and
// objects), none is storage, and each names a host; returns them by rank.
std::vector<RankSources> RequireSourcesAddUp(const std::vector<ExitInfo>& ranks) {
  std::vector<RankSources> out;
  for (const ExitInfo& r : ranks) {
    INFO(r.output);
    RankSources s = SourcesOf(r);
    uint64_t sum = 0;
    for (const auto& [source, bytes] : s.bytes) {
      sum += bytes;
      CHECK_FALSE(absl::StartsWith(source, "storage@"));
      CHECK_FALSE(absl::EndsWith(source, "@"));
    }
    CHECK(s.delivered > 0);
    CHECK(sum == s.delivered);
    CHECK(s.delivered == s.expected);
    out.push_back(std::move(s));
  }
  return out;
}

// The sources of the ranks ranks [first, first + count) on one host.
uint64_t BytesFrom(const std::vector<RankSources>& sources, int first, int count,
                   const std::string& source) {
  uint64_t total = 0;
  for (int r = first; r < first + count; ++r) {
    auto it = sources[r].bytes.find(source);
    if (it != sources[r].bytes.end()) total += it->second;
  }
  return total;
}

TEST_CASE("A host that lost its memory restores its ranks from its peers' replicas",
          "[memory_tier_cluster]") {
  TestCluster cluster;
  const absl::Status started = cluster.Start(3, kNodeFlags, kCoordinatorFlags);
  INFO(started.ToString());
  REQUIRE(started.ok());
  const std::vector<HostCounters> c0 = Counters(cluster);
  RequireAllOk(
      cluster.RunRanks("mem", "save", kHosts, 1, 0, kScale, Layout(2, 2, "--tier=memory")));
  const std::vector<HostCounters> c1 = Counters(cluster);
  // Nothing on storage; every host holds its part and its predecessor's.
  for (int i = 0; i < 3; ++i) {
    INFO("host " << i);
    CHECK(c1[i].storage_written == c0[i].storage_written);
    CHECK(c1[i].memory_held > 0);
    // Each host sent its files to its successor, and got its predecessor's.
    CHECK(c1[i].peer_sent > c0[i].peer_sent);
    CHECK(c1[i].peer_received > c0[i].peer_received);
  }
  // Committed once, listed by the coordinator and every host as in memory.
  CHECK(ListedSteps(cluster.coordinator(), "mem") == std::vector<int64_t>{1});
  for (int i = 0; i < 3; ++i) CHECK(ListedSteps(cluster.node(i), "mem") == std::vector<int64_t>{1});
  const v1::GetStatusResponse h0 = cluster.node(0).Status();
  REQUIRE(h0.memory_tier_jobs_size() == 1);
  CHECK(h0.memory_tier_jobs(0).copies() == 2);

  // h1's daemon dies; a new one for the same host starts with empty memory.
  cluster.node(1).Kill();
  REQUIRE(cluster.RestartNode(1).ok());
  REQUIRE(cluster.AwaitLiveHosts(3));
  CHECK(cluster.node(1).Status().memory_tier_bytes() == 0);

  // The same ranks load latest from memory: h1's ranks get every byte from
  // h0 and h2 (h2 holds h1's replica), and no host reads storage.
  const std::vector<HostCounters> c2 = Counters(cluster);
  std::vector<ExitInfo> loaded =
      cluster.RunRanks("mem", "load", kHosts, -1, kWorld, kScale, Layout(2, 2, "--from=memory"));
  RequireAllOk(loaded);
  RequireAllSay(loaded, "tiers=memory");
  // Each rank's load says where its bytes came from, adding up to them:
  // h1's ranks (3-5) all from peers, h1's own part from h2 (its replica);
  // the others from their own memory, or a peer.
  const std::vector<RankSources> sources = RequireSourcesAddUp(loaded);
  uint64_t h1_delivered = 0;
  for (int r = 3; r < 6; ++r) {
    INFO("rank " << r);
    h1_delivered += sources[r].delivered;
    for (const auto& [source, bytes] : sources[r].bytes) CHECK(absl::StartsWith(source, "peer@h"));
  }
  CHECK(BytesFrom(sources, 3, 3, "peer@h2") > 0);
  CHECK(BytesFrom(sources, 0, 3, "memory@h0") > 0);
  CHECK(BytesFrom(sources, 6, 2, "memory@h2") > 0);
  for (int r : {0, 1, 2, 6, 7}) CHECK(sources[r].bytes.count("memory@h1") == 0);
  // h1's log line says the same, for its three ranks together.
  const std::string h1_log = cluster.node(1).Output();
  INFO(h1_log);
  REQUIRE(absl::StrContains(h1_log, "ckptd: load job=mem step=1 "));
  CHECK(NumberAfter(h1_log.substr(h1_log.find("ckptd: load job=mem ")), "delivered_bytes=") ==
        h1_delivered);
  const std::vector<HostCounters> c3 = Counters(cluster);
  for (int i = 0; i < 3; ++i) {
    INFO("host " << i);
    CHECK(c3[i].storage_read == c2[i].storage_read);
  }
  CHECK(c3[1].memory_read == c2[1].memory_read);  // it holds nothing
  CHECK(c3[1].peer_received > c2[1].peer_received);
  CHECK(c3[2].memory_read > c2[2].memory_read);  // h1's replica is there
  // The holders verified every chunk where it lies and sent or handed it
  // out from there: nothing went through their pools.
  for (int i : {0, 2}) {
    INFO("host " << i);
    CHECK(c3[i].memory_in_place - c2[i].memory_in_place == c3[i].memory_read - c2[i].memory_read);
    // Their ranks attached before they asked to load: the step they hold
    // was checked then, not before the plan.
    CHECK(c3[i].early_checks == c2[i].early_checks + 1);
  }
  CHECK(c3[1].early_checks == c2[1].early_checks);  // it holds nothing to check

  // Resharded into six ranks on two hosts (TP=3) from memory too.
  const std::vector<HostCounters> c4 = Counters(cluster);
  RequireAllOk(cluster.RunRanks("mem", "load", {3, 0, 3}, -1, kWorld, kScale,
                                Layout(3, 1, "--from=memory")));
  const std::vector<HostCounters> c5 = Counters(cluster);
  for (int i = 0; i < 3; ++i) CHECK(c5[i].storage_read == c4[i].storage_read);
}

TEST_CASE("A memory-tier step whose holders are all gone is refused, naming a missing file",
          "[memory_tier_cluster]") {
  TestCluster cluster;
  REQUIRE(cluster.Start(3, kNodeFlags, kCoordinatorFlags).ok());
  RequireAllOk(
      cluster.RunRanks("gone", "save", kHosts, 4, 0, kScale, Layout(2, 2, "--tier=memory")));
  // h0's files live on h0 and h1: both lose their memory.
  for (int i : {0, 1}) {
    cluster.node(i).Kill();
    REQUIRE(cluster.RestartNode(i).ok());
  }
  REQUIRE(cluster.AwaitLiveHosts(3));
  const std::vector<ExitInfo> loaded =
      cluster.RunRanks("gone", "load", kHosts, -1, kWorld, kScale, Layout(2, 2, "--from=memory"));
  for (const ExitInfo& r : loaded) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, "no host of this load holds its file data/h0-"));
  }
}

TEST_CASE("Replicas go to another rack: a whole rack lost restores from memory",
          "[memory_tier_cluster]") {
  TestCluster cluster;
  REQUIRE(cluster.Start(4, kNodeFlags, kCoordinatorFlags).ok());
  // h0 and h1 in one rack, h2 and h3 in another: by name, h0's copy would
  // be on h1, in the same rack.
  for (int i = 0; i < 4; ++i) {
    cluster.node(i).Kill();
    REQUIRE(cluster.RestartNode(i, {i < 2 ? "--failure_domain=rack-a" : "--failure_domain=rack-b"})
                .ok());
  }
  REQUIRE(cluster.AwaitLiveHosts(4));
  const std::vector<int> hosts = {2, 2, 2, 2};
  RequireAllOk(
      cluster.RunRanks("racks", "save", hosts, 1, 0, kScale, Layout(2, 2, "--tier=memory")));
  // Rack a goes: both its daemons die and come back with empty memory.
  for (int i : {0, 1}) {
    cluster.node(i).Kill();
    REQUIRE(cluster.RestartNode(i).ok());
  }
  REQUIRE(cluster.AwaitLiveHosts(4));
  const std::vector<HostCounters> before = Counters(cluster);
  std::vector<ExitInfo> loaded =
      cluster.RunRanks("racks", "load", hosts, -1, kWorld, kScale, Layout(2, 2, "--from=memory"));
  RequireAllOk(loaded);  // every byte checked in the ranks
  RequireAllSay(loaded, "tiers=memory");
  const std::vector<HostCounters> after = Counters(cluster);
  for (int i = 0; i < 4; ++i) {
    INFO("host " << i);
    CHECK(after[i].storage_read == before[i].storage_read);
  }
  // Rack b held every copy of rack a's parts.
  CHECK(after[2].memory_read > before[2].memory_read);
  CHECK(after[3].memory_read > before[3].memory_read);
}

TEST_CASE("A byte flipped in a host's memory is taken from its replica on another host",
          "[memory_tier_cluster]") {
  TestCluster cluster;
  REQUIRE(cluster.Start(3, kNodeFlags, kCoordinatorFlags).ok());
  // h1 flips a byte of its own part in its memory once the save commits;
  // h2 holds the replica of that part.
  cluster.node(1).Kill();
  REQUIRE(cluster.RestartNode(1, {"--fault_corrupt_at=memory.after_commit"}).ok());
  REQUIRE(cluster.AwaitLiveHosts(3));
  RequireAllOk(
      cluster.RunRanks("flip", "save", kHosts, 1, 0, kScale, Layout(2, 2, "--tier=memory")));
  REQUIRE(cluster.node(1).WaitForOutput("flipped a byte of data/h1-"));

  // The trainer crashed; every rank loads latest from memory, bit-exact.
  const std::vector<HostCounters> before = Counters(cluster);
  const uint64_t fallbacks_before = cluster.node(1).Status().load_fallback_chunks();
  const uint64_t early_before = cluster.node(1).Status().memory_checks_early();
  std::vector<ExitInfo> loaded =
      cluster.RunRanks("flip", "load", kHosts, -1, kWorld, kScale, Layout(2, 2, "--from=memory"));
  RequireAllOk(loaded);  // every byte checked in the ranks
  RequireAllSay(loaded, "tiers=memory");
  // The part h1 set aside came from h2's replica; the rest of h1's own
  // from its memory.
  const std::vector<RankSources> sources = RequireSourcesAddUp(loaded);
  CHECK(BytesFrom(sources, 3, 3, "peer@h2") > 0);
  CHECK(BytesFrom(sources, 3, 3, "memory@h1") > 0);
  // h1 found the bad chunk before the plan and left its copy out: the
  // plan took that part from h2, and nothing from storage.
  CHECK(absl::StrContains(cluster.node(1).Output(), "memory-check job=flip step=1 file=data/h1-"));
  CHECK(cluster.node(1).Status().load_fallback_chunks() > fallbacks_before);
  // It found it as its ranks attached (early_step_check.h), and the load
  // took that check.
  CHECK(cluster.node(1).Status().memory_checks_early() == early_before + 1);
  for (int r = 3; r < 6; ++r) {  // h1's ranks say they had a fallback
    INFO(loaded[r].output);
    CHECK_FALSE(absl::StrContains(loaded[r].output, "fallback_chunks=0"));
  }
  const std::vector<HostCounters> after = Counters(cluster);
  for (int i = 0; i < 3; ++i) {
    INFO("host " << i);
    CHECK(after[i].storage_read == before[i].storage_read);
  }
  CHECK(after[2].peer_sent > before[2].peer_sent);
  CHECK(after[1].peer_received > before[1].peer_received);

  // Set aside, the copy stays out of later loads: loaded again, nothing is
  // checked or counted again.
  const uint64_t fallbacks = cluster.node(1).Status().load_fallback_chunks();
  RequireAllOk(
      cluster.RunRanks("flip", "load", kHosts, -1, kWorld, kScale, Layout(2, 2, "--from=memory")));
  CHECK(cluster.node(1).Status().load_fallback_chunks() == fallbacks);
}

TEST_CASE("A memory-tier save spread over hosts needs as many hosts as copies",
          "[memory_tier_cluster]") {
  TestCluster cluster;
  REQUIRE(cluster.Start(2, kNodeFlags, {"--memory_tier_bytes=67108864", "--memory_tier_replicas=2"})
              .ok());
  const std::vector<ExitInfo> saved =
      cluster.RunRanks("few", "save", {2, 2}, 1, 0, 1, {"--tier=memory"});
  for (const ExitInfo& r : saved) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, "--memory_tier_replicas"));
  }
  // Nothing was kept on either host.
  for (int i = 0; i < 2; ++i) CHECK(ListedSteps(cluster.node(i), "few").empty());
}

uint64_t MemoryHeld(TestCluster& cluster) {
  uint64_t total = 0;
  for (const HostCounters& c : Counters(cluster)) total += c.memory_held;
  return total;
}

// Acceptance 3 of the memory tier: erasure coding k=2, m=1 over three
// hosts. Each host loses its memory in turn (a fresh step each time); the
// ranks restore bit-exact (checked in the ranks) from the survivors' data
// and parity, reading no storage. The memory the tier holds is measured
// against full replication (R=1) of the same save.
TEST_CASE("Erasure coded over three hosts: any one host lost, its part is rebuilt from parity",
          "[memory_tier_cluster]") {
  uint64_t replicated = 0;
  uint64_t bytes = 0;
  {
    TestCluster cluster;
    REQUIRE(cluster.Start(3, kNodeFlags, kCoordinatorFlags).ok());
    RequireAllOk(
        cluster.RunRanks("rep", "save", kHosts, 1, 0, kScale, Layout(2, 2, "--tier=memory")));
    replicated = MemoryHeld(cluster);
    bytes = CheckpointBytes(cluster.coordinator(), "rep", 1);
  }
  TestCluster cluster;
  REQUIRE(
      cluster.Start(3, kNodeFlags, {"--memory_tier_bytes=67108864", "--memory_tier_erasure=2,1"})
          .ok());
  for (int lost = 0; lost < 3; ++lost) {
    const int64_t step = lost + 1;
    INFO("host h" << lost << " lost after step " << step);
    const uint64_t held_before = MemoryHeld(cluster);
    RequireAllOk(
        cluster.RunRanks("ec", "save", kHosts, step, 0, kScale, Layout(2, 2, "--tier=memory")));
    if (lost == 0) {
      // Each host holds its part and half of it again in parity: 1.5x the
      // checkpoint (plus manifests and block rounding), against 2x for a
      // replica each.
      const uint64_t coded = MemoryHeld(cluster) - held_before;
      std::printf(
          "memory tier held for a %llu-byte checkpoint on 3 hosts: erasure k=2,m=1 %llu "
          "(%.2fx), replicas R=1 %llu (%.2fx)\n",
          static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(coded),
          static_cast<double>(coded) / bytes, static_cast<unsigned long long>(replicated),
          static_cast<double>(replicated) / bytes);
      CHECK(coded < replicated);
      CHECK(coded <= bytes + bytes / 2 + 3 * (1 << 20));
      CHECK(coded >= bytes + bytes / 2 - bytes / 10);
    }
    cluster.node(lost).Kill();
    REQUIRE(cluster.RestartNode(lost).ok());
    REQUIRE(cluster.AwaitLiveHosts(3));
    const std::vector<HostCounters> c0 = Counters(cluster);
    std::vector<ExitInfo> loaded =
        cluster.RunRanks("ec", "load", kHosts, -1, kWorld, kScale, Layout(2, 2, "--from=memory"));
    RequireAllOk(loaded);
    RequireAllSay(loaded, absl::StrCat("loaded step ", step));
    RequireAllSay(loaded, "tiers=memory");
    // The lost host's part came rebuilt from parity, by the lost host
    // itself (its replacement): its ranks say so, and the sources add up.
    const std::vector<RankSources> sources = RequireSourcesAddUp(loaded);
    const int first_rank = lost == 0 ? 0 : lost == 1 ? 3 : 6;
    const std::string rebuilt = absl::StrCat("parity@h", lost);
    CHECK(BytesFrom(sources, first_rank, kHosts[lost], rebuilt) > 0);
    CHECK(BytesFrom(sources, first_rank, kHosts[lost], absl::StrCat("memory@h", lost)) == 0);
    // Logged and counted once, naming the job, the step, the host and its files.
    CHECK(absl::StrContains(cluster.node(lost).Output(),
                            absl::StrCat("ckptd: parity-rebuild job=ec step=", step, " host=\"h",
                                         lost, "\" files=\"data/h", lost, "-")));
    const std::vector<HostCounters> c1 = Counters(cluster);
    for (int i = 0; i < 3; ++i) CHECK(c1[i].storage_read == c0[i].storage_read);
    // The replacement rebuilt its part and keeps it: it holds the step.
    CHECK(absl::StrContains(cluster.node(lost).Output(),
                            "rebuild job=ec step=" + std::to_string(step) + " stripes="));
    CHECK(c1[lost].memory_held > 0);
    const v1::GetStatusResponse status = cluster.node((lost + 1) % 3).Status();
    REQUIRE(status.memory_tier_jobs_size() == 1);
    CHECK(status.memory_tier_jobs(0).erasure() == "2+1");
  }

  // A byte flipped in h2's own part (its only whole copy): h2 sets the
  // file aside before the plan, and the load rebuilds it from the others'
  // shares and parity, bit-exact, without storage.
  cluster.node(2).Kill();
  REQUIRE(cluster.RestartNode(2, {"--fault_corrupt_at=memory.after_commit"}).ok());
  REQUIRE(cluster.AwaitLiveHosts(3));
  RequireAllOk(cluster.RunRanks("ec", "save", kHosts, 4, 0, kScale, Layout(2, 2, "--tier=memory")));
  REQUIRE(cluster.node(2).WaitForOutput("flipped a byte of data/h2-"));
  const std::vector<HostCounters> c0 = Counters(cluster);
  std::vector<ExitInfo> loaded =
      cluster.RunRanks("ec", "load", kHosts, -1, kWorld, kScale, Layout(2, 2, "--from=memory"));
  RequireAllOk(loaded);
  RequireAllSay(loaded, "loaded step 4");
  RequireAllSay(loaded, "tiers=memory");
  CHECK(absl::StrContains(cluster.node(2).Output(), "memory-check job=ec step=4 file=data/h2-"));
  bool rebuilt = false;
  for (int i = 0; i < 3; ++i) {
    rebuilt = rebuilt || absl::StrContains(cluster.node(i).Output(), "rebuild job=ec step=4 ");
  }
  CHECK(rebuilt);
  const std::vector<HostCounters> c1 = Counters(cluster);
  for (int i = 0; i < 3; ++i) CHECK(c1[i].storage_read == c0[i].storage_read);
}

// Chunks encoded by the writers (--codec) travel in the memory tier as they
// are stored: replicas and parity copy the encoded files, and a host that
// lost its memory restores them from its peers, decoded on the way (every
// byte checked in the ranks).
TEST_CASE("Encoded chunks are replicated and parity-coded as stored, and restored from them",
          "[memory_tier_cluster][codec]") {
  const bool erasure = GENERATE(false, true);
  INFO((erasure ? "erasure k=2,m=1" : "replicas R=1"));
  std::vector<std::string> nodes = kNodeFlags;
  nodes.push_back("--codec=grouped-zstd");
  const std::vector<std::string> coordinator =
      erasure
          ? std::vector<std::string>{"--memory_tier_bytes=67108864", "--memory_tier_erasure=2,1"}
          : kCoordinatorFlags;
  TestCluster cluster;
  REQUIRE(cluster.Start(3, nodes, coordinator).ok());
  std::vector<std::string> save = Layout(2, 2, "--tier=memory");
  save.push_back("--compressible");
  RequireAllOk(cluster.RunRanks("enc", "save", kHosts, 1, 0, kScale, save));

  const v1::CheckpointManifest manifest = InspectManifest(cluster.coordinator(), "enc", 1);
  uint64_t raw = 0, stored = 0;
  int encoded = 0;
  for (const v1::TensorEntry& t : manifest.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) {
        raw += c.length();
        stored += c.codec() == v1::CHUNK_CODEC_NONE ? c.length() : c.stored_length();
        encoded += c.codec() == v1::CHUNK_CODEC_GROUPED_ZSTD ? 1 : 0;
      }
    }
  }
  CHECK(encoded > 0);
  CHECK(stored < raw * 3 / 4);

  cluster.node(1).Kill();
  REQUIRE(cluster.RestartNode(1).ok());
  REQUIRE(cluster.AwaitLiveHosts(3));
  std::vector<std::string> load = Layout(2, 2, "--from=memory");
  load.push_back("--compressible");
  std::vector<ExitInfo> loaded = cluster.RunRanks("enc", "load", kHosts, -1, kWorld, kScale, load);
  RequireAllOk(loaded);
  RequireAllSay(loaded, "tiers=memory");
  const std::vector<RankSources> sources = RequireSourcesAddUp(loaded);
  CHECK(BytesFrom(sources, 3, 3, erasure ? "parity@h1" : "peer@h2") > 0);
}

}  // namespace
}  // namespace ckpt::testing
