#include "daemon/planning/load_spread.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "daemon/planning/parallel_for.h"

namespace ckpt::planning {
namespace {

// A cluster's load is millions of chunks over thousands of hosts: hosts
// are numbered in name order, so that a set of hosts is a sorted list of
// integers and comparing two numbers compares the names (ties go to the
// host named first, as a set of names would have them).
class HostNumbers {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};

  HostNumbers(const std::map<int, std::string>& rank_hosts, const FileHolders* holders) {
    // A rank the map does not name is on host "" (it reads like any other:
    // the coordinator names every rank, so this is only for a caller's
    // mistake, kept as it was).
    names_.push_back("");
    for (const auto& [rank, host] : rank_hosts) names_.push_back(host);
    if (holders != nullptr) {
      for (const auto& [file, hosts] : *holders)
        names_.insert(names_.end(), hosts.begin(), hosts.end());
    }
    std::sort(names_.begin(), names_.end());
    names_.erase(std::unique(names_.begin(), names_.end()), names_.end());
    // Ranks are dense in practice (0 .. world-1): a table, else a map.
    const int most = rank_hosts.empty() ? -1 : rank_hosts.rbegin()->first;
    dense_ = most >= 0 && rank_hosts.begin()->first >= 0 &&
             static_cast<size_t>(most) < 2 * rank_hosts.size() + 1024;
    if (dense_) by_rank_.assign(static_cast<size_t>(most) + 1, Of(""));
    for (const auto& [rank, host] : rank_hosts) {
      if (dense_) {
        by_rank_[rank] = Of(host);
      } else {
        sparse_[rank] = Of(host);
      }
    }
  }

  uint32_t size() const { return static_cast<uint32_t>(names_.size()); }
  const std::string& name(uint32_t id) const { return names_[id]; }
  // A host the constructor was given.
  uint32_t Of(const std::string& host) const {
    return static_cast<uint32_t>(std::lower_bound(names_.begin(), names_.end(), host) -
                                 names_.begin());
  }
  uint32_t OfRank(int rank) const {
    if (dense_) {
      return rank >= 0 && static_cast<size_t>(rank) < by_rank_.size() ? by_rank_[rank] : Of("");
    }
    auto it = sparse_.find(rank);
    return it == sparse_.end() ? Of("") : it->second;
  }

 private:
  std::vector<std::string> names_;
  bool dense_ = false;
  std::vector<uint32_t> by_rank_;
  absl::flat_hash_map<int, uint32_t> sparse_;
};

// One stored chunk the job needs: a tensor chunk read, or the object reads
// that share one stored chunk (a global object several ranks want).
// There are millions: its object readers lie beside (Units::objects).
struct Unit {
  static constexpr uint32_t kObjects = ~uint32_t{0};
  uint32_t read = kObjects;  // a tensor chunk (its GlobalLoad id), or
  uint32_t objects = 0;      // its object readers: Units::objects
  uint64_t length = 0;
  // The hosts that need it: Units::hosts[first_host, end_host), ascending.
  uint32_t first_host = 0;
  uint32_t end_host = 0;
  uint32_t reader = HostNumbers::kNone;
  uint32_t group = 0;
};

struct Units {
  const GlobalLoad* global = nullptr;
  std::vector<Unit> list;
  std::vector<std::vector<const v1::ObjectRead*>> objects;  // by Unit::objects
  std::vector<uint32_t> hosts;                              // each unit's, one after the other

  absl::Span<const uint32_t> HostsOf(const Unit& u) const {
    return absl::MakeConstSpan(hosts).subspan(u.first_host, u.end_host - u.first_host);
  }
  bool Needs(const Unit& u, uint32_t host) const {
    const absl::Span<const uint32_t> needed = HostsOf(u);
    return std::binary_search(needed.begin(), needed.end(), host);
  }
  absl::string_view File(const Unit& u) const {
    return u.read != Unit::kObjects ? global->file(u.read)
                                    : objects[u.objects].front()->chunk().file();
  }
  // Calls fn(host) for the hosts whose rooms hold it, in order: those that
  // need it, and its reader (a host that holds the file without needing
  // the chunk only forwards it).
  template <typename Fn>
  void ForEachInvolved(const Unit& u, Fn&& fn) const {
    const absl::Span<const uint32_t> needed = HostsOf(u);
    bool reader_done = u.reader == HostNumbers::kNone || Needs(u, u.reader);
    for (uint32_t host : needed) {
      if (!reader_done && u.reader < host) {
        fn(u.reader);
        reader_done = true;
      }
      fn(host);
    }
    if (!reader_done) fn(u.reader);
  }
};

// Sorts the hosts and keeps each once.
void SortedOnce(std::vector<uint32_t>& hosts) {
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
}

// Appends `scratch`'s hosts, sorted and once each, as the unit's.
void SetHosts(Unit& u, std::vector<uint32_t>& scratch, Units& units) {
  SortedOnce(scratch);
  u.first_host = static_cast<uint32_t>(units.hosts.size());
  units.hosts.insert(units.hosts.end(), scratch.begin(), scratch.end());
  u.end_host = static_cast<uint32_t>(units.hosts.size());
  scratch.clear();
}

Units CollectUnits(const GlobalLoad& global, const HostNumbers& numbers, int threads) {
  Units units;
  units.global = &global;
  const size_t reads = global.reads();
  // Each read's hosts, worked out by id (global_load.h: its askers lie
  // near), on several threads, each range of ids with a list of its own,
  // joined in order.
  struct Seen {
    uint32_t first = 0;  // its hosts: by_id[first, first + count)
    uint32_t count = 0;
    uint64_t length = 0;
  };
  struct Range {
    size_t begin = 0;  // its ids, or units: [begin, end)
    size_t end = 0;
    std::vector<uint32_t> hosts;
    uint64_t listed = 0;  // of its units' hosts
  };
  std::vector<Range> ranges(std::max(1, threads));
  std::vector<Seen> seen(reads);
  size_t used = ParallelFor(
      reads, threads, reads, kMinWorkPerRange, [&](size_t range, size_t begin, size_t end) {
        ranges[range].begin = begin;
        ranges[range].end = end;
        std::vector<uint32_t>& hosts = ranges[range].hosts;
        hosts.reserve(end - begin);
        std::vector<uint32_t> scratch;
        for (size_t id = begin; id < end; ++id) {
          global.ForEachRank(static_cast<uint32_t>(id),
                             [&](int rank) { scratch.push_back(numbers.OfRank(rank)); });
          SortedOnce(scratch);
          seen[id] =
              Seen{static_cast<uint32_t>(hosts.size()), static_cast<uint32_t>(scratch.size()),
                   global.chunk(static_cast<uint32_t>(id)).length};
          hosts.insert(hosts.end(), scratch.begin(), scratch.end());
          scratch.clear();
        }
      });
  std::vector<uint32_t> by_id = std::move(ranges[0].hosts);
  for (size_t r = 1; r < used; ++r) {
    const uint32_t base = static_cast<uint32_t>(by_id.size());
    by_id.insert(by_id.end(), ranges[r].hosts.begin(), ranges[r].hosts.end());
    ranges[r].hosts = std::vector<uint32_t>();
    for (size_t id = ranges[r].begin; id < ranges[r].end; ++id) seen[id].first += base;
  }
  // The units in the planner's order (by file, then offset: each host
  // reads neighbours), their hosts laid out again in that order, the one
  // every later pass walks them in: each range of units found, then (its
  // place known from the earlier ranges' counts) filled.
  units.list.resize(reads);
  used = ParallelFor(reads, threads, reads, kMinWorkPerRange,
                     [&](size_t range, size_t begin, size_t end) {
                       ranges[range].begin = begin;
                       ranges[range].end = end;
                       uint64_t listed = 0;
                       for (size_t k = begin; k < end; ++k) {
                         Unit& u = units.list[k];
                         u.read = global.ReadAt(k);
                         const Seen& s = seen[u.read];
                         u.length = s.length;
                         u.first_host = s.first;  // into by_id until filled
                         u.end_host = s.first + s.count;
                         listed += s.count;
                       }
                       ranges[range].listed = listed;
                     });
  units.hosts.resize(by_id.size());
  std::vector<uint64_t> place(used, 0);
  for (size_t r = 1; r < used; ++r) place[r] = place[r - 1] + ranges[r - 1].listed;
  ParallelFor(used, threads, used * kMinWorkPerRange, kMinWorkPerRange,
              [&](size_t, size_t first_range, size_t end_range) {
                for (size_t r = first_range; r < end_range; ++r) {
                  uint32_t at = static_cast<uint32_t>(place[r]);
                  for (size_t k = ranges[r].begin; k < ranges[r].end; ++k) {
                    Unit& u = units.list[k];
                    const uint32_t count = u.end_host - u.first_host;
                    std::copy_n(by_id.begin() + u.first_host, count, units.hosts.begin() + at);
                    u.first_host = at;
                    u.end_host = at + count;
                    at += count;
                  }
                }
              });
  std::vector<uint32_t> scratch;
  // Objects by their whole stored chunk, as every host groups them
  // (load_groups.cc), so that both ends of a transfer list them alike.
  using ChunkKey = std::tuple<std::string, uint64_t, uint64_t, uint32_t>;
  std::map<ChunkKey, std::vector<const v1::ObjectRead*>> objects;
  for (const v1::ObjectRead& read : global.header().objects()) {
    const v1::StoredChunk& c = read.chunk();
    objects[{c.file(), c.file_offset(), c.length(), c.crc32c()}].push_back(&read);
  }
  for (auto& [key, reads] : objects) {
    Unit& u = units.list.emplace_back();
    u.objects = static_cast<uint32_t>(units.objects.size());
    u.length = std::get<2>(key);
    units.objects.push_back(std::move(reads));
    for (const v1::ObjectRead* read : units.objects.back())
      scratch.push_back(numbers.OfRank(read->rank()));
    SetHosts(u, scratch, units);
  }
  return units;
}

// Readers balanced by bytes, largest chunks first; ties to the host named
// first, so the plan is the same every time.
void ChooseReaders(Units& units, const HostNumbers& numbers, const FileHolders* holders) {
  std::vector<uint32_t> order(units.list.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return units.list[a].length > units.list[b].length;
  });
  std::vector<uint64_t> load(numbers.size(), 0);
  // The holders of the file last looked up: units come a file at a time.
  std::optional<absl::string_view> held_file;
  std::vector<uint32_t> holding;
  std::vector<uint32_t> candidates;
  for (uint32_t i : order) {
    Unit& u = units.list[i];
    absl::Span<const uint32_t> choose = units.HostsOf(u);
    if (holders != nullptr) {
      // Only a host holding the file can read it: one that needs it too if
      // any, else any holder (which forwards it all).
      if (!held_file.has_value() || *held_file != units.File(u)) {
        held_file = units.File(u);
        holding.clear();
        auto it = holders->find(std::string(*held_file));
        if (it != holders->end()) {
          for (const std::string& host : it->second) holding.push_back(numbers.Of(host));
        }
      }
      candidates.clear();
      std::set_intersection(choose.begin(), choose.end(), holding.begin(), holding.end(),
                            std::back_inserter(candidates));
      choose = candidates.empty() ? absl::MakeConstSpan(holding) : absl::MakeConstSpan(candidates);
    }
    for (uint32_t host : choose) {
      if (u.reader == HostNumbers::kNone || load[host] < load[u.reader]) u.reader = host;
    }
    // No candidate (a file no host holds, refused before a spread): host "".
    if (u.reader == HostNumbers::kNone) u.reader = numbers.Of("");
    load[u.reader] += u.length;
  }
}

// Cuts the units, in order, into groups of at most group_bytes on any host
// (a unit larger than that is a group of its own).
uint32_t NumberGroups(Units& units, uint32_t hosts, uint64_t group_bytes) {
  std::vector<uint64_t> in_group(hosts, 0);
  std::vector<uint32_t> touched;  // the hosts in_group counts, to clear
  uint32_t group = 0;
  for (Unit& u : units.list) {
    bool full = false;
    units.ForEachInvolved(u, [&](uint32_t host) {
      if (in_group[host] > 0 && in_group[host] + u.length > group_bytes) full = true;
    });
    if (full) {
      ++group;
      for (uint32_t host : touched) in_group[host] = 0;
      touched.clear();
    }
    units.ForEachInvolved(u, [&](uint32_t host) {
      if (in_group[host] == 0) touched.push_back(host);
      in_group[host] += u.length;
    });
    u.group = group;
  }
  return units.list.empty() ? 0 : group + 1;
}

void Route(v1::PeerRoute& route, const Units& units, const Unit& u, uint32_t host,
           const HostNumbers& numbers) {
  route.set_group(u.group);
  if (u.reader != host) {
    route.set_source_host(numbers.name(u.reader));
    return;
  }
  for (uint32_t other : units.HostsOf(u)) {
    if (other != host) route.add_forward_to(numbers.name(other));
  }
}

// Adds unit u's reads for `host` (one of the hosts its room holds it in) to
// the host's part.
void AddToPart(const Units& units, const Unit& u, uint32_t host, const HostNumbers& numbers,
               v1::LoadAssignment& part) {
  if (!units.Needs(u, host)) {
    // Its reader only: read and forwarded, delivered to no rank here.
    if (u.read != Unit::kObjects) {
      v1::ChunkRead& read = *units.global->AddRead(u.read, part, [](int) { return false; });
      Route(*read.mutable_route(), units, u, host, numbers);
    } else {
      v1::ObjectRead& read = *part.add_objects();
      read = *units.objects[u.objects].front();
      read.set_rank(-1);
      read.set_request(0);
      Route(*read.mutable_route(), units, u, host, numbers);
    }
    return;
  }
  if (u.read != Unit::kObjects) {
    // Its copies to this host's ranks only.
    v1::ChunkRead& read = *units.global->AddRead(
        u.read, part, [&](int rank) { return numbers.OfRank(rank) == host; });
    Route(*read.mutable_route(), units, u, host, numbers);
    return;
  }
  for (const v1::ObjectRead* object : units.objects[u.objects]) {
    if (numbers.OfRank(object->rank()) != host) continue;
    v1::ObjectRead& read = *part.add_objects();
    read = *object;
    Route(*read.mutable_route(), units, u, host, numbers);
  }
}

}  // namespace

struct LoadSpread::Decisions {
  std::shared_ptr<const GlobalLoad> global;
  HostNumbers numbers;
  Units units;
  v1::LoadPeers peers;
  // Each host's units, in order: units_of[first[host], first[host + 1]).
  std::vector<uint32_t> first;
  std::vector<uint32_t> units_of;
  std::vector<bool> has_part;  // by host
  std::vector<std::string> hosts;
  // Each host's ranks' sizes.
  std::vector<std::vector<const v1::LoadAssignment::RankSizes*>> sizes;
  uint64_t unique_bytes = 0;

  Decisions(std::shared_ptr<const GlobalLoad> plan, const std::map<int, std::string>& rank_hosts,
            const FileHolders* holders)
      : global(std::move(plan)), numbers(rank_hosts, holders) {}
};

LoadSpread::LoadSpread(std::shared_ptr<const GlobalLoad> global,
                       const std::map<int, std::string>& rank_hosts,
                       const std::map<std::string, std::string>& addresses, uint64_t group_bytes,
                       uint64_t load_id, const std::string& secret, const FileHolders* holders,
                       int threads) {
  auto d = std::make_unique<Decisions>(std::move(global), rank_hosts, holders);
  const HostNumbers& numbers = d->numbers;
  d->units = CollectUnits(*d->global, numbers, PlanningThreads(threads));
  ChooseReaders(d->units, numbers, holders);
  const uint32_t groups =
      NumberGroups(d->units, numbers.size(), std::max<uint64_t>(group_bytes, 1));
  // Every host of a rank has a part, whatever it reads; a host that only
  // holds files has one if it reads.
  d->has_part.assign(numbers.size(), false);
  for (const auto& [rank, host] : rank_hosts) {
    auto it = addresses.find(host);
    (*d->peers.mutable_addresses())[host] = it == addresses.end() ? "" : it->second;
    d->has_part[numbers.Of(host)] = true;
  }
  d->peers.set_load_id(load_id);
  d->peers.set_secret(secret);
  d->peers.set_groups(groups);
  d->first.assign(numbers.size() + 1, 0);
  for (const Unit& u : d->units.list) {
    d->unique_bytes += u.length;
    d->units.ForEachInvolved(u, [&](uint32_t host) { ++d->first[host + 1]; });
  }
  std::partial_sum(d->first.begin(), d->first.end(), d->first.begin());
  d->units_of.resize(d->first.back());
  {
    std::vector<uint32_t> next(d->first.begin(), d->first.end() - 1);
    for (uint32_t i = 0; i < d->units.list.size(); ++i) {
      d->units.ForEachInvolved(d->units.list[i],
                               [&](uint32_t host) { d->units_of[next[host]++] = i; });
    }
  }
  for (uint32_t host = 0; host < numbers.size(); ++host) {
    if (d->first[host + 1] > d->first[host]) d->has_part[host] = true;
    if (d->has_part[host]) d->hosts.push_back(numbers.name(host));
  }
  d->sizes.resize(numbers.size());
  for (const v1::LoadAssignment::RankSizes& sizes : d->global->header().sizes()) {
    auto it = rank_hosts.find(sizes.rank());
    if (it != rank_hosts.end()) d->sizes[numbers.Of(it->second)].push_back(&sizes);
  }
  decisions_ = std::move(d);
}

LoadSpread::~LoadSpread() = default;
LoadSpread::LoadSpread(LoadSpread&&) noexcept = default;
LoadSpread& LoadSpread::operator=(LoadSpread&&) noexcept = default;

const std::vector<std::string>& LoadSpread::hosts() const { return decisions_->hosts; }
uint64_t LoadSpread::unique_bytes() const { return decisions_->unique_bytes; }
const GlobalLoad& LoadSpread::global() const { return *decisions_->global; }

std::optional<v1::LoadAssignment> LoadSpread::Part(const std::string& name) const {
  const Decisions& d = *decisions_;
  const auto known = std::lower_bound(d.hosts.begin(), d.hosts.end(), name);
  if (known == d.hosts.end() || *known != name) return std::nullopt;
  const uint32_t host = d.numbers.Of(name);
  std::optional<v1::LoadAssignment> part(std::in_place);
  part->set_step(d.global->header().step());
  part->set_checkpoint_path(d.global->header().checkpoint_path());
  *part->mutable_peers() = d.peers;
  part->mutable_reads()->Reserve(static_cast<int>(d.first[host + 1] - d.first[host]));
  for (uint32_t k = d.first[host]; k < d.first[host + 1]; ++k) {
    AddToPart(d.units, d.units.list[d.units_of[k]], host, d.numbers, *part);
  }
  for (const v1::LoadAssignment::RankSizes* sizes : d.sizes[host]) *part->add_sizes() = *sizes;
  return part;
}

}  // namespace ckpt::planning
