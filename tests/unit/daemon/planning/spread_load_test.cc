// A load spread over hosts, planned and carried out in memory: the
// coordinator's global plan cut into hosts' parts (SpreadLoad), each part
// grouped the way the host's load session does (GroupSpreadLoadReads), and
// the groups run in the global order: each host reads its chunks from the
// saved files into its room, sends each transfer (its chunks back to back)
// to the host that expects it, which lands it at its own offset; then the
// ranks copy out. Checked: each stored chunk is read by exactly one host,
// one that needs it; every transfer's bytes are what the receiver expects
// where it expects them; every requested byte reaches its rank exactly
// once and is right; reads balance over the hosts; no host's group exceeds
// group_bytes unless one chunk does.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"
#include "daemon/planning/global_load.h"
#include "daemon/planning/load_groups.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/load_spread.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_planner.h"
#include "proto/lib/copy_run.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

constexpr int kWorld = 5;
constexpr uint64_t kAlignment = 512;
const std::map<int, std::string> kRankHosts = {
    {0, "hA"}, {1, "hA"}, {2, "hB"}, {3, "hC"}, {4, "hC"}};

// Saved by 5 ranks: a row-split fp32 weight, a replicated bias, a per-rank
// object each and a global object.
Saved SaveFiveRanks() {
  v1::NodeSavePlan node = SingleHost(kWorld, 2);
  for (int r = 0; r < kWorld; ++r) {
    AddShard(node, r, BoxShard("w", v1::FLOAT32, {200, 64}, {40 * r, 0}, {40, 64}));
    AddShard(node, r, Whole("b", v1::BFLOAT16, {3000}));
    *RankOf(node, r).add_objects() = Object("rng", false, 100 + r);
  }
  *RankOf(node, 0).add_objects() = Object("cfg", true, 7000);
  return Save({node});
}

// Loaded by the same world resharded by columns: every rank needs a part
// of every weight chunk; all want the bias, the global object and their own.
v1::NodeLoadPlan LoadFiveRanks() {
  Requests requests;
  for (int r = 0; r < kWorld; ++r) {
    const int64_t cols = r == kWorld - 1 ? 64 - 12 * r : 12;
    requests[r] = {BoxShard("w", v1::FLOAT32, {200, 64}, {0, 12 * r}, {200, cols}),
                   Whole("b", v1::BFLOAT16, {3000})};
  }
  std::map<int, std::vector<std::string>> objects;
  for (int r = 0; r < kWorld; ++r) objects[r] = {"cfg", "rng"};
  return LoadNode("all", requests, objects);
}

using Key = std::tuple<int, bool, uint32_t>;  // rank, is object, request

// Plans the spread (with `holders`, from the hosts holding each file) and
// carries it out, checking every byte (see the top of this file).
void CheckSpread(const Saved& saved, const v1::NodeLoadPlan& node,
                 const std::shared_ptr<const GlobalLoad>& global, uint64_t group_bytes,
                 const planning::FileHolders* holders) {
  const std::vector<std::vector<bool>> on_device(kWorld, std::vector<bool>(2, false));
  INFO("group_bytes " << group_bytes);
  const planning::LoadSpread spread(global, kRankHosts,
                                    {{"hA", "a:1"}, {"hB", "b:1"}, {"hC", "c:1"}}, group_bytes, 42,
                                    std::string(16, 's'), holders);
  REQUIRE(spread.hosts() == std::vector<std::string>{"hA", "hB", "hC"});
  CHECK_FALSE(spread.Part("hD").has_value());
  std::map<std::string, std::vector<LoadGroup>> groups;
  std::map<std::string, v1::LoadAssignment> parts;  // the groups point into them
  for (const std::string& host : spread.hosts()) {
    std::optional<v1::LoadAssignment> made = spread.Part(host);
    REQUIRE(made.has_value());
    const v1::LoadAssignment& part = parts[host] = std::move(*made);
    CHECK(part.peers().groups() > 0);
    CHECK(part.peers().addresses().size() == 3);
    groups[host] = GroupSpreadLoadReads(part, kWorld, on_device, kAlignment);
  }
  // What each rank must get.
  std::map<Key, std::string> expected, got;
  std::map<Key, std::vector<int>> times;
  for (const auto& rank : node.ranks()) {
    for (int i = 0; i < rank.tensors_size(); ++i) {
      expected[{rank.rank(), false, i}] = PackedBytes(rank.tensors(i));
    }
  }
  for (const v1::ObjectRead& read : global->header().objects()) {
    expected[{read.rank(), true, read.request()}] =
        ObjectBytes(read.key(), read.key() == "cfg" ? -1 : read.rank(), read.chunk().length());
  }
  for (const auto& [key, bytes] : expected) {
    got[key].assign(bytes.size(), '\0');
    times[key].assign(bytes.size(), 0);
  }

  std::set<std::tuple<std::string, uint64_t>> read_once;
  std::map<std::string, uint64_t> read_bytes;
  // Rooms per host and global group, filled with what each host reads.
  std::map<std::pair<std::string, uint32_t>, std::string> rooms;
  for (const auto& [host, list] : groups) {
    uint32_t last = 0;
    for (const LoadGroup& g : list) {
      CHECK(g.peer_group >= last);  // the global order
      last = g.peer_group;
      std::string& room = rooms[{host, g.peer_group}];
      room.assign(g.room_bytes, '\x5a');
      uint64_t local = 0, in = 0;
      for (const GroupChunk& c : g.chunks) {
        (c.source.empty() ? local : in) += c.chunk->length();
        if (!c.source.empty()) continue;
        CHECK(c.room_offset % kAlignment == 0);
        REQUIRE(read_once.emplace(c.chunk->file(), c.chunk->file_offset()).second);
        // Only a host holding the file reads it.
        if (holders != nullptr) CHECK(holders->at(c.chunk->file()).count(host) == 1);
        read_bytes[host] += c.chunk->length();
        room.replace(c.room_offset, c.chunk->length(), saved.files.at(c.chunk->file()),
                     c.chunk->file_offset(), c.chunk->length());
      }
      CHECK((local + in <= group_bytes || g.chunks.size() == 1));
    }
  }
  // Transfers: the sender's chunks back to back, landed where the
  // receiver expects them.
  for (const auto& [host, list] : groups) {
    for (const LoadGroup& g : list) {
      for (const GroupTransfer& t : g.outgoing) {
        std::string bytes;
        for (size_t i : t.chunks) {
          const GroupChunk& c = g.chunks[i];
          bytes += rooms[{host, g.peer_group}].substr(c.room_offset, c.chunk->length());
        }
        REQUIRE(bytes.size() == t.bytes);
        const std::vector<LoadGroup>& theirs = groups.at(t.host);
        auto match = std::find_if(theirs.begin(), theirs.end(),
                                  [&](const LoadGroup& o) { return o.peer_group == g.peer_group; });
        REQUIRE(match != theirs.end());
        int found = 0;
        for (const GroupTransfer& in : match->incoming) {
          if (in.host != host) continue;
          ++found;
          REQUIRE(in.bytes == t.bytes);
          CHECK(in.room_offset % kAlignment == 0);
          rooms[{t.host, g.peer_group}].replace(in.room_offset, in.bytes, bytes);
        }
        CHECK(found == 1);
      }
    }
  }
  // Every incoming transfer has its sender.
  for (const auto& [host_name, list] : groups) {
    // A plain reference: clang before 16 cannot capture a structured binding.
    const std::string& host = host_name;
    for (const LoadGroup& g : list) {
      for (const GroupTransfer& in : g.incoming) {
        const std::vector<LoadGroup>& theirs = groups.at(in.host);
        CHECK(std::any_of(theirs.begin(), theirs.end(), [&](const LoadGroup& o) {
          return o.peer_group == g.peer_group &&
                 std::any_of(o.outgoing.begin(), o.outgoing.end(),
                             [&](const GroupTransfer& t) { return t.host == host; });
        }));
      }
    }
  }
  // The ranks copy out of their host's rooms.
  for (const auto& [host, list] : groups) {
    for (const LoadGroup& g : list) {
      const std::string& room = rooms[{host, g.peer_group}];
      for (int rank = 0; rank < kWorld; ++rank) {
        if (!g.host[rank].empty()) CHECK(kRankHosts.at(rank) == host);
        for (const v1::Delivery& d : g.host[rank]) {
          const Key key{rank, d.target() == v1::Delivery::OBJECT, d.request()};
          REQUIRE(got.count(key) == 1);
          const uint64_t n = d.count() <= 1 ? 1 : d.count();
          for (uint64_t k = 0; k < n; ++k) {
            const uint64_t src = d.pool_offset() + k * d.src_stride();
            const uint64_t dst = d.dest_offset() + k * d.dest_stride();
            REQUIRE(src + d.length() <= room.size());
            REQUIRE(dst + d.length() <= got[key].size());
            got[key].replace(dst, d.length(), room, src, d.length());
            for (uint64_t i = dst; i < dst + d.length(); ++i) ++times[key][i];
          }
        }
      }
    }
  }
  for (const auto& [key, bytes] : expected) {
    INFO("rank " << std::get<0>(key) << (std::get<1>(key) ? " object " : " tensor ")
                 << std::get<2>(key));
    CHECK(got[key] == bytes);
    CHECK(std::all_of(times[key].begin(), times[key].end(), [](int t) { return t == 1; }));
  }
  // Everything needed was read, once, and about evenly.
  uint64_t total = 0;
  for (const auto& [host, bytes] : read_bytes) total += bytes;
  CHECK(total == spread.unique_bytes());
  if (holders != nullptr) return;  // who reads is up to who holds the files
  for (const auto& [host, bytes] : read_bytes) {
    INFO(host << " read " << bytes << " of " << total);
    CHECK(bytes <= total / 3 + total / 5);
  }
}

TEST_CASE("spread load: each chunk read once, forwarded, every byte delivered once",
          "[spread_load]") {
  const Saved saved = SaveFiveRanks();
  const v1::NodeLoadPlan node = LoadFiveRanks();
  absl::StatusOr<std::shared_ptr<GlobalLoad>> global =
      PlanGlobalLoad(saved.manifest, {node}, RequestLimits{});
  CKPT_REQUIRE_OK(global);
  for (uint64_t group_bytes : {uint64_t{1}, uint64_t{9000}, uint64_t{1} << 30}) {
    INFO("group_bytes " << group_bytes);
    CheckSpread(saved, node, *global, group_bytes, nullptr);
  }
}

// The memory tier: each file is on the host that wrote it and a replica;
// here every file is held by hosts that need none of some chunks, and one
// file only by a host that forwards it all.
TEST_CASE("spread load from holders: each chunk read by a host holding its file", "[spread_load]") {
  const Saved saved = SaveFiveRanks();
  const v1::NodeLoadPlan node = LoadFiveRanks();
  absl::StatusOr<std::shared_ptr<GlobalLoad>> global =
      PlanGlobalLoad(saved.manifest, {node}, RequestLimits{});
  CKPT_REQUIRE_OK(global);
  std::set<std::string> files;
  for (absl::string_view file : (*global)->files()) files.emplace(file);
  for (const v1::ObjectRead& read : (*global)->header().objects())
    files.insert(read.chunk().file());
  REQUIRE(files.size() >= 2);
  planning::FileHolders holders;
  const std::vector<std::set<std::string>> choices = {{"hB"}, {"hA", "hC"}, {"hC"}};
  size_t i = 0;
  for (const std::string& file : files) holders[file] = choices[i++ % choices.size()];
  for (uint64_t group_bytes : {uint64_t{1}, uint64_t{9000}, uint64_t{1} << 30}) {
    INFO("group_bytes " << group_bytes);
    CheckSpread(saved, node, *global, group_bytes, &holders);
  }
}

TEST_CASE("spread load: a chunk one host needs alone is neither forwarded nor received",
          "[spread_load]") {
  const Saved saved = SaveFiveRanks();
  Requests requests;
  requests[0] = {BoxShard("w", v1::FLOAT32, {200, 64}, {0, 0}, {40, 64})};    // hA
  requests[2] = {BoxShard("w", v1::FLOAT32, {200, 64}, {80, 0}, {40, 64})};   // hB
  requests[3] = {BoxShard("w", v1::FLOAT32, {200, 64}, {160, 0}, {40, 64})};  // hC
  absl::StatusOr<std::shared_ptr<GlobalLoad>> global =
      PlanGlobalLoad(saved.manifest, {LoadNode("all", requests)}, RequestLimits{});
  CKPT_REQUIRE_OK(global);
  const planning::LoadSpread spread(*global, {{0, "hA"}, {2, "hB"}, {3, "hC"}},
                                    {{"hA", "a:1"}, {"hB", "b:1"}, {"hC", "c:1"}}, 1 << 20, 7,
                                    std::string(16, 's'));
  REQUIRE(spread.hosts().size() == 3);
  for (const std::string& host : spread.hosts()) {
    const std::optional<v1::LoadAssignment> part = spread.Part(host);
    REQUIRE(part.has_value());
    CHECK(part->reads_size() > 0);
    for (const v1::ChunkRead& read : part->reads()) {
      CHECK(read.route().source_host().empty());
      CHECK(read.route().forward_to_size() == 0);
    }
  }
}

// A load of a cluster's shape, planned: 32 ranks saved 1100 tensors, each
// in 32 row parts; 48 ranks on 16 hosts (3 each) load them by 8 row groups
// of 4 parts, every group asked for by 6 ranks on 6 hosts, odd tensors'
// rows cut inside the parts' chunks.
constexpr int kSaveRanks = 32;
constexpr int kLoadRanks = 48;
constexpr int kTensors = 1100;  // 35,200 chunks: the spread runs on several threads
constexpr int64_t kRows = 8 * kSaveRanks;

v1::CheckpointManifest ManyShards() {
  v1::NodeSavePlan node = SingleHost(kSaveRanks, 4);
  for (int r = 0; r < kSaveRanks; ++r) {
    for (int t = 0; t < kTensors; ++t) {
      AddShard(node, r,
               BoxShard(absl::StrCat("t", t), v1::FLOAT32, {kRows, 16}, {8 * r, 0}, {8, 16}));
    }
  }
  absl::StatusOr<v1::SaveAssignment> saved = PlanSave({node}, PlannerOptions());
  REQUIRE(saved.ok());
  return planning::ManifestOf(*saved);
}

std::vector<v1::NodeLoadPlan> LoadByGroups(int rank_step) {
  std::map<std::string, Requests> by_host;
  for (int r = 0; r < kLoadRanks; ++r) {
    const int64_t group = r % 8;
    std::vector<v1::TensorShard>& asked = by_host[absl::StrCat("h", r / 3)][r * rank_step];
    for (int t = 0; t < kTensors; ++t) {
      const int64_t cut = t % 2 == 1 ? 3 : 0;
      asked.push_back(BoxShard(absl::StrCat("t", t), v1::FLOAT32, {kRows, 16},
                               {32 * group + cut, 0}, {32 - 2 * cut, 16}));
    }
  }
  std::vector<v1::NodeLoadPlan> nodes;
  for (const auto& [host, requests] : by_host) nodes.push_back(LoadNode(host, requests));
  return nodes;
}

TEST_CASE("spread load at scale: each read once, by a host that needs it, its copies cut by host",
          "[spread_load]") {
  constexpr int kHosts = kLoadRanks / 3;
  constexpr uint64_t kGroupBytes = 200000;
  // Ranks numbered densely (a table) and sparsely (a map).
  const int rank_step = GENERATE(1, 100003);
  INFO("rank step " << rank_step);
  const v1::CheckpointManifest manifest = ManyShards();
  const std::vector<v1::NodeLoadPlan> nodes = LoadByGroups(rank_step);
  absl::StatusOr<std::shared_ptr<GlobalLoad>> global =
      PlanGlobalLoad(manifest, nodes, RequestLimits{});
  CKPT_REQUIRE_OK(global);
  // The same plan as one message: what each host's part is cut from.
  absl::StatusOr<v1::LoadAssignment> whole = PlanLoad(manifest, nodes, RequestLimits{});
  CKPT_REQUIRE_OK(whole);
  REQUIRE(whole->reads_size() == kSaveRanks * kTensors);
  REQUIRE((*global)->reads() == static_cast<size_t>(whole->reads_size()));
  std::map<int, std::string> rank_hosts;
  std::map<std::string, std::string> addresses;
  for (const v1::NodeLoadPlan& node : nodes) {
    addresses[node.host().host()] = node.host().host() + ":1";
    for (const auto& rank : node.ranks()) rank_hosts[rank.rank()] = node.host().host();
  }
  const LoadSpread spread(*global, rank_hosts, addresses, kGroupBytes, 9, "s", nullptr, 3);
  REQUIRE(spread.hosts().size() == kHosts);
  std::map<std::string, v1::LoadAssignment> parts;
  for (const std::string& host : spread.hosts()) parts[host] = *spread.Part(host);
  // A part is made the same every time it is asked for, and decided alike
  // on one thread.
  CHECK(google::protobuf::util::MessageDifferencer::Equals(parts.at("h3"), *spread.Part("h3")));
  const LoadSpread on_one(*global, rank_hosts, addresses, kGroupBytes, 9, "s", nullptr, 1);
  for (const std::string& host : on_one.hosts()) {
    INFO("host " << host);
    CHECK(google::protobuf::util::MessageDifferencer::Equals(parts.at(host), *on_one.Part(host)));
  }
  // Groups hold at most kGroupBytes on any host; reads balance.
  std::map<std::pair<std::string, uint64_t>, std::string> reader;  // by (file, offset)
  std::map<std::pair<std::string, uint64_t>, std::map<std::string, const v1::ChunkRead*>> listed;
  std::map<std::pair<uint32_t, std::string>, uint64_t> in_group;
  uint64_t total = 0;
  std::map<std::string, uint64_t> read_bytes;
  for (const auto& [host, part] : parts) {
    CHECK(part.step() == whole->step());
    CHECK(part.peers().groups() > 0);
    CHECK(part.peers().addresses().size() == kHosts);
    for (const v1::ChunkRead& read : part.reads()) {
      const std::pair<std::string, uint64_t> at{read.chunk().file(), read.chunk().file_offset()};
      CHECK(listed[at].emplace(host, &read).second);
      in_group[{read.route().group(), host}] += read.chunk().length();
      CHECK(read.route().group() < part.peers().groups());
      if (read.route().source_host().empty()) {
        CHECK(reader.emplace(at, host).second);
        read_bytes[host] += read.chunk().length();
        total += read.chunk().length();
      }
    }
  }
  CHECK(total == spread.unique_bytes());
  REQUIRE(reader.size() == static_cast<size_t>(whole->reads_size()));
  for (const auto& [key, bytes] : in_group) CHECK(bytes <= kGroupBytes);
  for (const auto& [host, bytes] : read_bytes) {
    INFO(host << " read " << bytes << " of " << total);
    CHECK(bytes <= total / kHosts + total / 10);
  }
  // Each read: in the parts of the hosts that need it only, each with the
  // whole plan's copies to that host's ranks; read by one of them, which
  // forwards it to every other.
  size_t wanted_in_all = 0;
  size_t listed_in_all = 0;
  for (const auto& [at, hosts] : listed) listed_in_all += hosts.size();
  for (const v1::ChunkRead& read : whole->reads()) {
    const std::pair<std::string, uint64_t> at{read.chunk().file(), read.chunk().file_offset()};
    std::map<std::string, v1::ChunkRead> wanted;  // by host: the read, its ranks' copies only
    for (const v1::CopyRun& run : read.runs()) {
      std::map<std::string, v1::CopyRun*> cut;
      ForEachRunRank(run, [&](int rank) {
        const std::string& host = rank_hosts.at(rank);
        auto [mine, fresh] = wanted.try_emplace(host);
        if (fresh) {
          *mine->second.mutable_chunk() = read.chunk();
          mine->second.set_fqn(read.fqn());
        }
        v1::CopyRun*& copy = cut[host];
        if (copy != nullptr) {
          copy->add_more_ranks(rank);
          return;
        }
        copy = mine->second.add_runs();
        *copy = run;
        copy->clear_more_ranks();
        copy->set_rank(rank);
      });
    }
    wanted_in_all += wanted.size();
    const std::string& from = reader.at(at);
    REQUIRE(wanted.count(from) == 1);
    for (const auto& [host, expected] : wanted) {
      INFO("host " << host << ", " << at.first << " at " << at.second);
      const auto found = listed[at].find(host);
      REQUIRE(found != listed[at].end());
      v1::ChunkRead got = *found->second;
      got.clear_route();
      CHECK(google::protobuf::util::MessageDifferencer::Equals(got, expected));
      const v1::PeerRoute& route = found->second->route();
      if (host == from) {
        std::set<std::string> others;
        for (const auto& [h, r] : wanted) {
          if (h != host) others.insert(h);
        }
        CHECK(std::set<std::string>(route.forward_to().begin(), route.forward_to().end()) ==
              others);
      } else {
        CHECK(route.source_host() == from);
      }
    }
  }
  CHECK(listed_in_all == wanted_in_all);
}

}  // namespace
}  // namespace ckpt::planning
