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
#include <random>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"
#include "daemon/planning/load_groups.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/load_spread.h"
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
void CheckSpread(const Saved& saved, const v1::NodeLoadPlan& node, const v1::LoadAssignment& global,
                 uint64_t group_bytes, const planning::FileHolders* holders) {
  const std::vector<std::vector<bool>> on_device(kWorld, std::vector<bool>(2, false));
  INFO("group_bytes " << group_bytes);
  const planning::LoadSpread spread(std::make_shared<const v1::LoadAssignment>(global), kRankHosts,
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
  for (const v1::ObjectRead& read : global.objects()) {
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
  absl::StatusOr<v1::LoadAssignment> global = planning::PlanLoad(saved.manifest, {node});
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
  absl::StatusOr<v1::LoadAssignment> global = planning::PlanLoad(saved.manifest, {node});
  CKPT_REQUIRE_OK(global);
  std::set<std::string> files;
  for (const v1::ChunkRead& read : global->reads()) files.insert(read.chunk().file());
  for (const v1::ObjectRead& read : global->objects()) files.insert(read.chunk().file());
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
  absl::StatusOr<v1::LoadAssignment> global =
      planning::PlanLoad(saved.manifest, {LoadNode("all", requests)});
  CKPT_REQUIRE_OK(global);
  const planning::LoadSpread spread(
      std::make_shared<const v1::LoadAssignment>(*global), {{0, "hA"}, {2, "hB"}, {3, "hC"}},
      {{"hA", "a:1"}, {"hB", "b:1"}, {"hC", "c:1"}}, 1 << 20, 7, std::string(16, 's'));
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

// A cluster-sized global plan made up directly (no files): tens of
// thousands of chunk reads, each copied to a few ranks of 16 hosts, so
// that the hosts' parts are made on several threads.
v1::LoadAssignment ManyReads(int ranks, int reads, int rank_step) {
  std::mt19937 random(7);
  v1::LoadAssignment global;
  global.set_step(3);
  for (int r = 0; r < reads; ++r) {
    v1::ChunkRead& read = *global.add_reads();
    read.set_fqn(absl::StrCat("t", r % 97));
    v1::StoredChunk& chunk = *read.mutable_chunk();
    chunk.set_file(absl::StrCat("f", r % 11));
    chunk.set_file_offset(uint64_t{4096} * static_cast<uint64_t>(r));
    chunk.set_length(1000 + random() % 3000);
    chunk.set_crc32c(static_cast<uint32_t>(r));
    const int copies = 1 + static_cast<int>(random() % 4);
    for (int c = 0; c < copies; ++c) {
      v1::CopyRun& run = *read.add_runs();
      run.set_rank(static_cast<int>(random() % ranks) * rank_step);
      run.set_request(c);
      run.set_length(chunk.length());
      // Replicas of one copy: a few more ranks, on any host.
      for (int more = static_cast<int>(random() % 3); more > 0; --more) {
        run.add_more_ranks(static_cast<int>(random() % ranks) * rank_step);
      }
    }
  }
  return global;
}

TEST_CASE("spread load at scale: each read once, by a host that needs it, forwarded to the rest",
          "[spread_load]") {
  constexpr int kRanks = 64;
  constexpr int kHosts = 16;
  constexpr uint64_t kGroupBytes = 200000;
  // Ranks numbered densely (a table) and sparsely (a map).
  const int rank_step = GENERATE(1, 100003);
  INFO("rank step " << rank_step);
  auto global = std::make_shared<const v1::LoadAssignment>(ManyReads(kRanks, 30000, rank_step));
  std::map<int, std::string> rank_hosts;
  std::map<std::string, std::string> addresses;
  for (int r = 0; r < kRanks; ++r) {
    rank_hosts[r * rank_step] = absl::StrCat("h", r % kHosts);
    addresses[absl::StrCat("h", r % kHosts)] = absl::StrCat("10.0.0.", r % kHosts, ":1");
  }
  const LoadSpread spread(global, rank_hosts, addresses, kGroupBytes, 9, "s");
  REQUIRE(spread.hosts().size() == kHosts);
  std::map<std::string, v1::LoadAssignment> parts;
  for (const std::string& host : spread.hosts()) parts[host] = *spread.Part(host);
  // A part is made the same every time it is asked for.
  CHECK(google::protobuf::util::MessageDifferencer::Equals(parts.at("h3"), *spread.Part("h3")));
  // Groups hold at most kGroupBytes on any host; reads balance.
  std::map<uint64_t, std::string> reader;  // by file offset
  std::map<std::pair<uint32_t, std::string>, uint64_t> in_group;
  uint64_t total = 0;
  std::map<std::string, uint64_t> read_bytes;
  for (const auto& [host, part] : parts) {
    CHECK(part.step() == 3);
    CHECK(part.peers().groups() > 0);
    CHECK(part.peers().addresses().size() == kHosts);
    for (const v1::ChunkRead& read : part.reads()) {
      in_group[{read.route().group(), host}] += read.chunk().length();
      CHECK(read.route().group() < part.peers().groups());
      if (read.route().source_host().empty()) {
        CHECK(reader.emplace(read.chunk().file_offset(), host).second);
        read_bytes[host] += read.chunk().length();
        total += read.chunk().length();
      }
      for (const v1::CopyRun& run : read.runs()) {
        ForEachRunRank(run, [&](int rank) { CHECK(rank_hosts.at(rank) == host); });
      }
    }
  }
  CHECK(total == spread.unique_bytes());
  REQUIRE(reader.size() == static_cast<size_t>(global->reads_size()));
  for (const auto& [key, bytes] : in_group) CHECK(bytes <= kGroupBytes);
  for (const auto& [host, bytes] : read_bytes) {
    INFO(host << " read " << bytes << " of " << total);
    CHECK(bytes <= total / kHosts + total / 20);
  }
  // Each read: in the parts of the hosts that need it only; read by one of
  // them, which forwards it to every other, with each host's ranks'
  // copies only.
  std::map<std::string, std::map<uint64_t, const v1::ChunkRead*>> by_offset;
  size_t listed = 0;
  for (const auto& [host, part] : parts) {
    for (const v1::ChunkRead& read : part.reads()) {
      CHECK(by_offset[host].emplace(read.chunk().file_offset(), &read).second);
      ++listed;
    }
  }
  size_t wanted_in_all = 0;
  for (const v1::ChunkRead& read : global->reads()) {
    std::map<std::string, std::multiset<int>> wanted;  // by host, the ranks copied to
    for (const v1::CopyRun& run : read.runs()) {
      ForEachRunRank(run, [&](int rank) { wanted[rank_hosts.at(rank)].insert(rank); });
    }
    wanted_in_all += wanted.size();
    const std::string& from = reader.at(read.chunk().file_offset());
    REQUIRE(wanted.count(from) == 1);
    for (const auto& [host, ranks] : wanted) {
      const auto found = by_offset[host].find(read.chunk().file_offset());
      REQUIRE(found != by_offset[host].end());
      const v1::ChunkRead* mine = found->second;
      std::multiset<int> got;
      for (const v1::CopyRun& run : mine->runs()) {
        ForEachRunRank(run, [&](int rank) { got.insert(rank); });
      }
      CHECK(got == ranks);
      if (host == from) {
        std::set<std::string> others;
        for (const auto& [h, r] : wanted) {
          if (h != host) others.insert(h);
        }
        CHECK(std::set<std::string>(mine->route().forward_to().begin(),
                                    mine->route().forward_to().end()) == others);
      } else {
        CHECK(mine->route().source_host() == from);
      }
    }
  }
  CHECK(listed == wanted_in_all);
}

}  // namespace
}  // namespace ckpt::planning
