#include "daemon/planning/replica_placement.h"

#include <algorithm>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ckpt::planning {
namespace {

// Whether `host` holds every file of `share` its range touches.
bool HoldsShare(const FileHolders& holders, const std::string& host,
                const v1::ErasureShare& share) {
  uint64_t start = 0;
  for (const v1::ReplicaFile& f : share.files()) {
    const uint64_t end = start + f.bytes();
    const bool touched = share.offset() < end && share.offset() + share.bytes() > start;
    start = end;
    if (!touched) continue;
    auto it = holders.find(f.name());
    if (it == holders.end() || it->second.count(host) == 0) return false;
  }
  return true;
}

// The save's hosts in ring order: failure domains spread around the ring so
// that, wherever the domains allow it, no host is followed by one of its
// own domain: each next host is taken from the domain with the most hosts
// left other than the previous host's (ties by name; hosts by name within
// a domain). The hosts after one in the ring, and an erasure group of
// consecutive ones, are then in other domains. A host without a domain is
// one of its own: without domains the ring is by host name.
std::vector<std::string> RingOrder(
    const std::map<std::string, std::shared_ptr<const v1::HostAssignment>>& parts) {
  std::map<std::string, std::string> domains;
  for (const auto& [host, part] : parts) domains[host] = part->host().failure_domain();
  return RingOfHosts(domains);
}

}  // namespace

std::vector<std::string> RingOfHosts(const std::map<std::string, std::string>& domain_of) {
  std::map<std::string, std::deque<std::string>> domains;
  for (const auto& [host, domain] : domain_of) {  // by name
    // Keyed apart: a host's own "domain" never joins a named one.
    domains[domain.empty() ? absl::StrCat("host:", host) : absl::StrCat("domain:", domain)]
        .push_back(host);
  }
  std::vector<std::string> ring;
  std::string previous;
  while (ring.size() < domain_of.size()) {
    auto pick = domains.end();
    for (auto it = domains.begin(); it != domains.end(); ++it) {
      if (it->second.empty() || it->first == previous) continue;
      if (pick == domains.end() || it->second.size() > pick->second.size()) pick = it;
    }
    if (pick == domains.end()) pick = domains.find(previous);  // only its own domain is left
    ring.push_back(pick->second.front());
    pick->second.pop_front();
    previous = pick->first;
  }
  return ring;
}

v1::ReplicaPeer ReplicaFilesOf(const v1::HostAssignment& part) {
  std::vector<uint64_t> ends(part.files_size(), 0);  // by writer
  for (const v1::WriteItem& item : part.items()) {
    // The planner's writer is one of the part's files (node_save_plan.h
    // checks it again on the host).
    if (item.writer() < 0 || item.writer() >= part.files_size()) continue;
    uint64_t& end = ends[item.writer()];
    end = std::max(end, item.file_offset() + item.bytes());
  }
  v1::ReplicaPeer peer;
  peer.set_host(part.host().host());
  // In the part's order: both ends list them alike.
  for (int w = 0; w < part.files_size(); ++w) {
    v1::ReplicaFile* f = peer.add_files();
    f->set_name(part.files(w));
    f->set_bytes(ends[w]);
  }
  return peer;
}

absl::StatusOr<std::map<std::string, v1::ReplicaPlan>> PlaceReplicas(
    const std::map<std::string, std::shared_ptr<const v1::HostAssignment>>& parts,
    const std::map<std::string, std::string>& addresses, int replicas, uint64_t replica_id,
    const std::string& secret) {
  const std::vector<std::string> hosts = RingOrder(parts);
  const int n = static_cast<int>(hosts.size());
  if (replicas < 0 || replicas > n - 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the memory tier keeps ", replicas, " replica(s) of each host's part on other hosts ",
        "(--memory_tier_replicas), but this save spans ", n,
        " host(s): save to durable storage, or run the coordinator with fewer replicas"));
  }
  for (const std::string& host : hosts) {
    auto it = addresses.find(host);
    if (replicas > 0 && (it == addresses.end() || it->second.empty())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host ", host, " has no peer data channel (--peer_address): its memory-tier part ",
          "cannot be replicated"));
    }
  }
  std::map<std::string, v1::ReplicaPlan> plans;
  std::vector<v1::ReplicaPeer> files;
  for (int i = 0; i < n; ++i) {
    files.push_back(ReplicaFilesOf(*parts.at(hosts[i])));
    files.back().set_index(i);
    auto it = addresses.find(hosts[i]);
    if (it != addresses.end()) files.back().set_address(it->second);
    v1::ReplicaPlan& plan = plans[hosts[i]];
    plan.set_replica_id(replica_id);
    plan.set_secret(secret);
    plan.set_index(i);
    plan.set_piece_bytes(kReplicaPieceBytes);
  }
  for (int i = 0; i < n; ++i) {
    for (int k = 1; k <= replicas; ++k) {
      const int j = (i + k) % n;
      v1::ReplicaPeer* to = plans[hosts[i]].add_send_to();
      *to = files[i];  // the sender's files, sent to j
      to->set_host(hosts[j]);
      to->set_address(files[j].address());
      to->set_index(j);
      *plans[hosts[j]].add_receive_from() = files[i];
    }
  }
  return plans;
}

std::string ParityFileName(uint32_t stripe, uint32_t j) {
  return absl::StrCat("parity/", stripe, "-", j, ".bin");
}

absl::StatusOr<ErasurePlacement> PlaceErasure(
    const std::map<std::string, std::shared_ptr<const v1::HostAssignment>>& parts,
    const std::map<std::string, std::string>& addresses, int k, int m, uint64_t id,
    const std::string& secret) {
  const int g = k + m;
  const int n = static_cast<int>(parts.size());
  if (k < 1 || m < 1 || n % g != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the memory tier erasure codes each group of k+m = ", g,
        " hosts (--memory_tier_erasure=", k, ",", m, "), but this save spans ", n,
        " host(s), not a multiple of it: save to durable storage, or change the code"));
  }
  const std::vector<std::string> hosts = RingOrder(parts);
  std::vector<v1::ReplicaPeer> files;
  std::vector<uint64_t> totals;
  for (const std::string& host : hosts) {
    const v1::HostAssignment* part = parts.at(host).get();
    auto it = addresses.find(host);
    if (it == addresses.end() || it->second.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host ", host, " has no peer data channel (--peer_address): its memory-tier part ",
          "cannot be erasure coded"));
    }
    files.push_back(ReplicaFilesOf(*part));
    uint64_t total = 0;
    for (const v1::ReplicaFile& f : files.back().files()) total += f.bytes();
    totals.push_back(total);
  }
  ErasurePlacement placement;
  v1::ErasurePlan& whole = placement.whole;
  whole.set_id(id);
  whole.set_secret(secret);
  whole.set_piece_bytes(kErasurePieceBytes);
  whole.set_k(k);
  whole.set_m(m);
  for (int first = 0; first < n; first += g) {
    auto host_at = [&](int position) { return first + position % g; };
    for (int s = 0; s < g; ++s) {
      v1::ErasureStripe& stripe = *whole.add_stripes();
      stripe.set_number(static_cast<uint32_t>(first + s));
      for (int t = 0; t < k; ++t) {  // data share t: host at s+t, its share t
        const int h = host_at(s + t);
        const uint64_t unit = (totals[h] + k - 1) / k;
        const uint64_t offset = std::min(totals[h], unit * t);
        v1::ErasureShare& share = *stripe.add_shares();
        share.set_host(hosts[h]);
        share.set_address(addresses.at(hosts[h]));
        share.set_offset(offset);
        share.set_bytes(std::min(totals[h], offset + unit) - offset);
        *share.mutable_files() = files[h].files();
        stripe.set_unit_bytes(std::max(stripe.unit_bytes(), share.bytes()));
      }
      for (int j = 0; j < m; ++j) {
        const int h = host_at(s + k + j);
        v1::ErasureShare& share = *stripe.add_shares();
        share.set_host(hosts[h]);
        share.set_address(addresses.at(hosts[h]));
        share.set_bytes(stripe.unit_bytes());
        v1::ReplicaFile* parity = share.add_files();
        parity->set_name(ParityFileName(stripe.number(), j));
        parity->set_bytes(stripe.unit_bytes());
      }
    }
  }
  for (const v1::ErasureStripe& stripe : whole.stripes()) {
    for (const v1::ErasureShare& share : stripe.shares()) {
      v1::ErasurePlan& mine = placement.hosts[share.host()];
      if (mine.stripes_size() > 0 &&
          mine.stripes(mine.stripes_size() - 1).number() == stripe.number()) {
        continue;  // a host is in a stripe once
      }
      *mine.add_stripes() = stripe;
    }
  }
  for (auto& [host, mine] : placement.hosts) {
    mine.set_id(id);
    mine.set_secret(secret);
    mine.set_piece_bytes(kErasurePieceBytes);
    mine.set_k(k);
    mine.set_m(m);
  }
  return placement;
}

absl::StatusOr<v1::ErasureRebuild> PlanRebuild(const v1::ErasurePlan& stripes,
                                               const std::set<std::string>& load_hosts,
                                               FileHolders& holders) {
  // The stripes come from this coordinator's own memory, but are checked
  // as any input is: k and m as the code allows.
  if (stripes.k() < 1 || stripes.m() < 1 || uint64_t{stripes.k()} + stripes.m() > 32) {
    return absl::DataLossError(absl::StrCat("the stripes say k=", stripes.k(), " m=", stripes.m()));
  }
  const int k = static_cast<int>(stripes.k());
  auto available = [&](const v1::ErasureShare& share) {
    return share.bytes() == 0 ||
           (load_hosts.count(share.host()) > 0 && HoldsShare(holders, share.host(), share));
  };
  // Files each host holds, to give a lost host's shares to the emptiest.
  std::map<std::string, size_t> held;
  for (const std::string& host : load_hosts) held[host] = 0;
  for (const auto& [file, hosts] : holders) {
    for (const std::string& host : hosts) {
      if (load_hosts.count(host) > 0) ++held[host];
    }
  }
  if (load_hosts.empty()) return absl::UnavailableError("no host takes part in the load");
  std::map<std::string, std::string> rebuilder_of;  // lost host -> who rebuilds its shares
  auto rebuilder = [&](const std::string& lost) {
    auto it = rebuilder_of.find(lost);
    if (it != rebuilder_of.end()) return it->second;
    std::string chosen = lost;  // its replacement, when it takes part
    if (load_hosts.count(lost) == 0) {
      for (const auto& [host, files] : held) {
        if (chosen == lost || files < held[chosen]) chosen = host;
      }
    }
    return rebuilder_of[lost] = chosen;
  };
  v1::ErasureRebuild rebuild;
  std::vector<std::pair<const v1::ErasureShare*, std::string>> rebuilt;  // share, its rebuilder
  for (const v1::ErasureStripe& stripe : stripes.stripes()) {
    if (stripe.shares_size() != k + static_cast<int>(stripes.m())) {
      return absl::DataLossError(
          absl::StrCat("stripe ", stripe.number(), " has ", stripe.shares_size(), " shares"));
    }
    std::vector<uint32_t> sources;
    std::vector<uint32_t> lost;
    for (int i = 0; i < stripe.shares_size(); ++i) {
      if (available(stripe.shares(i))) {
        if (static_cast<int>(sources.size()) < k) sources.push_back(i);
      } else if (i < k) {
        lost.push_back(i);
      }
    }
    if (lost.empty()) continue;
    if (static_cast<int>(sources.size()) < k) {
      return absl::UnavailableError(absl::StrCat(
          "stripe ", stripe.number(), " lost more shares than its ", stripes.m(),
          " parity can rebuild (hosts ", stripe.shares(lost.front()).host(), " and others)"));
    }
    for (uint32_t t : lost) {
      v1::StripeRebuild& sr = *rebuild.add_stripes();
      *sr.mutable_stripe() = stripe;
      for (uint32_t i : sources) sr.add_sources(i);
      sr.add_lost(t);
      const v1::ErasureShare& share = stripe.shares(t);
      sr.set_rebuilder(rebuilder(share.host()));
      rebuilt.emplace_back(&share, sr.rebuilder());
    }
  }
  // The rebuilt files are held by their rebuilders from now on.
  for (const auto& [share, host] : rebuilt) {
    for (const v1::ReplicaFile& f : share->files()) holders[f.name()].insert(host);
  }
  rebuild.set_k(stripes.k());
  rebuild.set_m(stripes.m());
  rebuild.set_piece_bytes(stripes.piece_bytes());
  return rebuild;
}

std::vector<LostShare> LostShares(const v1::ErasureRebuild& rebuild) {
  std::vector<LostShare> out;
  for (const v1::StripeRebuild& sr : rebuild.stripes()) {
    for (uint32_t t : sr.lost()) {
      if (t >= static_cast<uint32_t>(sr.stripe().shares_size())) continue;
      const v1::ErasureShare& share = sr.stripe().shares(static_cast<int>(t));
      LostShare& lost = out.emplace_back();
      lost.host = share.host();
      lost.rebuilder = sr.rebuilder();
      lost.bytes = share.bytes();
      // The share is [offset, offset + bytes) of the host's files laid end to end.
      const uint64_t begin = share.offset();
      const uint64_t end = begin + share.bytes();
      uint64_t start = 0;
      for (const v1::ReplicaFile& f : share.files()) {
        const uint64_t stop = start + f.bytes();
        if (f.bytes() > 0 && start < end && begin < stop) lost.files.push_back(f.name());
        start = stop;
      }
    }
  }
  return out;
}

}  // namespace ckpt::planning
