#include "daemon/coordinator/replica_placement.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ckpt::coordinator {

v1::ReplicaPeer ReplicaFilesOf(const v1::HostAssignment& part) {
  std::map<std::string, uint64_t> ends;
  for (const std::string& file : part.files()) ends[file] = 0;
  for (const v1::WriteItem& item : part.items()) {
    uint64_t& end = ends[item.file()];
    end = std::max(end, item.file_offset() + item.bytes());
  }
  v1::ReplicaPeer peer;
  peer.set_host(part.host().host());
  // In the part's order: both ends list them alike.
  for (const std::string& file : part.files()) {
    v1::ReplicaFile* f = peer.add_files();
    f->set_name(file);
    f->set_bytes(ends[file]);
  }
  return peer;
}

absl::StatusOr<std::map<std::string, v1::ReplicaPlan>> PlaceReplicas(
    const std::map<std::string, std::shared_ptr<const v1::HostAssignment>>& parts,
    const std::map<std::string, std::string>& addresses, int replicas, uint64_t replica_id,
    const std::string& secret) {
  std::vector<std::string> hosts;  // sorted: a map's keys
  for (const auto& [host, part] : parts) hosts.push_back(host);
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

}  // namespace ckpt::coordinator
