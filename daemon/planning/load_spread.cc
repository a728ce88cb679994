#include "daemon/planning/load_spread.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "proto/lib/copy_run.h"

namespace ckpt::planning {
namespace {

// One stored chunk the job needs: a tensor chunk read, or the object reads
// that share one stored chunk (a global object several ranks want).
struct Unit {
  const v1::ChunkRead* read = nullptr;         // a tensor chunk, or
  std::vector<const v1::ObjectRead*> objects;  // an object's readers
  uint64_t length = 0;
  std::set<std::string> hosts;  // that need it
  std::string reader;
  uint32_t group = 0;
  const std::string& file() const {
    return read != nullptr ? read->chunk().file() : objects.front()->chunk().file();
  }
  // The hosts whose rooms hold it: those that need it, and its reader (a
  // host that holds it without needing it only forwards it).
  std::set<std::string> Involved() const {
    std::set<std::string> all = hosts;
    if (!reader.empty()) all.insert(reader);
    return all;
  }
};

std::vector<Unit> CollectUnits(const v1::LoadAssignment& global,
                               const std::map<int, std::string>& rank_hosts) {
  auto host_of = [&](int rank) -> const std::string& {
    static const std::string kNone;
    auto it = rank_hosts.find(rank);
    return it == rank_hosts.end() ? kNone : it->second;
  };
  std::vector<Unit> units;
  units.reserve(global.reads_size());
  // The planner's order (by file, then offset): each host reads neighbours.
  for (const v1::ChunkRead& read : global.reads()) {
    Unit& u = units.emplace_back();
    u.read = &read;
    u.length = read.chunk().length();
    for (const v1::CopyRun& run : read.runs()) {
      ForEachRunRank(run, [&](int rank) { u.hosts.insert(host_of(rank)); });
    }
  }
  // Objects by their whole stored chunk, as every host groups them
  // (load_groups.cc), so that both ends of a transfer list them alike.
  using ChunkKey = std::tuple<std::string, uint64_t, uint64_t, uint32_t>;
  std::map<ChunkKey, std::vector<const v1::ObjectRead*>> objects;
  for (const v1::ObjectRead& read : global.objects()) {
    const v1::StoredChunk& c = read.chunk();
    objects[{c.file(), c.file_offset(), c.length(), c.crc32c()}].push_back(&read);
  }
  for (auto& [key, reads] : objects) {
    Unit& u = units.emplace_back();
    u.objects = std::move(reads);
    u.length = std::get<2>(key);
    for (const v1::ObjectRead* read : u.objects) u.hosts.insert(host_of(read->rank()));
  }
  return units;
}

// Readers balanced by bytes, largest chunks first; ties to the host named
// first, so the plan is the same every time.
void ChooseReaders(std::vector<Unit>& units, const FileHolders* holders) {
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return units[a].length > units[b].length; });
  std::map<std::string, uint64_t> load;
  for (size_t i : order) {
    Unit& u = units[i];
    std::set<std::string> candidates = u.hosts;
    if (holders != nullptr) {
      // Only a host holding the file can read it: one that needs it too if
      // any, else any holder (which forwards it all).
      std::set<std::string> held;
      auto it = holders->find(u.file());
      if (it != holders->end()) {
        for (const std::string& host : it->second) {
          if (u.hosts.count(host) > 0) held.insert(host);
        }
        if (held.empty()) held = it->second;
      }
      candidates = std::move(held);
    }
    for (const std::string& host : candidates) {
      if (u.reader.empty() || load[host] < load[u.reader]) u.reader = host;
    }
    load[u.reader] += u.length;
  }
}

// Cuts the units, in order, into groups of at most group_bytes on any host
// (a unit larger than that is a group of its own).
uint32_t NumberGroups(std::vector<Unit>& units, uint64_t group_bytes) {
  std::map<std::string, uint64_t> in_group;
  uint32_t group = 0;
  bool empty = true;
  for (Unit& u : units) {
    bool full = false;
    const std::set<std::string> involved = u.Involved();
    for (const std::string& host : involved) {
      if (in_group[host] > 0 && in_group[host] + u.length > group_bytes) full = true;
    }
    if (full) {
      ++group;
      in_group.clear();
    }
    for (const std::string& host : involved) in_group[host] += u.length;
    u.group = group;
    empty = false;
  }
  return empty ? 0 : group + 1;
}

void Route(v1::PeerRoute& route, const Unit& u, const std::string& host) {
  route.set_group(u.group);
  if (u.reader != host) {
    route.set_source_host(u.reader);
    return;
  }
  for (const std::string& other : u.hosts) {
    if (other != host) route.add_forward_to(other);
  }
}

}  // namespace

LoadSpread SpreadLoad(const v1::LoadAssignment& global,
                      const std::map<int, std::string>& rank_hosts,
                      const std::map<std::string, std::string>& addresses, uint64_t group_bytes,
                      uint64_t load_id, const std::string& secret, const FileHolders* holders) {
  std::vector<Unit> units = CollectUnits(global, rank_hosts);
  ChooseReaders(units, holders);
  const uint32_t groups = NumberGroups(units, std::max<uint64_t>(group_bytes, 1));

  LoadSpread spread;
  std::set<std::string> hosts;
  for (const auto& [rank, host] : rank_hosts) hosts.insert(host);
  for (const std::string& host : hosts) {
    v1::LoadAssignment& part = spread.parts[host];
    part.set_step(global.step());
    part.set_checkpoint_path(global.checkpoint_path());
    v1::LoadPeers& peers = *part.mutable_peers();
    for (const std::string& h : hosts) {
      auto it = addresses.find(h);
      (*peers.mutable_addresses())[h] = it == addresses.end() ? "" : it->second;
    }
    peers.set_load_id(load_id);
    peers.set_secret(secret);
    peers.set_groups(groups);
  }
  for (const v1::LoadAssignment::RankSizes& sizes : global.sizes()) {
    auto it = rank_hosts.find(sizes.rank());
    if (it != rank_hosts.end()) *spread.parts[it->second].add_sizes() = sizes;
  }
  for (const Unit& u : units) {
    spread.unique_bytes += u.length;
    for (const std::string& host : u.Involved()) {
      v1::LoadAssignment& part = spread.parts[host];
      if (u.hosts.count(host) == 0) {
        // Its reader only: read and forwarded, delivered to no rank here.
        if (u.read != nullptr) {
          v1::ChunkRead& read = *part.add_reads();
          *read.mutable_chunk() = u.read->chunk();
          read.set_fqn(u.read->fqn());
          Route(*read.mutable_route(), u, host);
        } else {
          v1::ObjectRead& read = *part.add_objects();
          read = *u.objects.front();
          read.set_rank(-1);
          read.set_request(0);
          Route(*read.mutable_route(), u, host);
        }
        continue;
      }
      if (u.read != nullptr) {
        v1::ChunkRead& read = *part.add_reads();
        *read.mutable_chunk() = u.read->chunk();
        read.set_fqn(u.read->fqn());
        // Each run with this host's ranks only.
        for (const v1::CopyRun& run : u.read->runs()) {
          v1::CopyRun* mine = nullptr;
          ForEachRunRank(run, [&](int rank) {
            auto it = rank_hosts.find(rank);
            if (it == rank_hosts.end() || it->second != host) return;
            if (mine != nullptr) {
              mine->add_more_ranks(rank);
              return;
            }
            mine = read.add_runs();
            *mine = run;
            mine->clear_more_ranks();
            mine->set_rank(rank);
          });
        }
        Route(*read.mutable_route(), u, host);
        continue;
      }
      for (const v1::ObjectRead* object : u.objects) {
        auto it = rank_hosts.find(object->rank());
        if (it == rank_hosts.end() || it->second != host) continue;
        v1::ObjectRead& read = *part.add_objects();
        read = *object;
        Route(*read.mutable_route(), u, host);
      }
    }
  }
  return spread;
}

}  // namespace ckpt::planning
