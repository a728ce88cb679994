// Fuzz target: the memory-tier parts of a coordinator's save plan as a node
// receives them (SaveAssignment.replicas and .erasure, over the network),
// through the node's checks (daemon/tier/memory_plan_check.h) and the
// room they take; then the stripes through the coordinator's rebuild
// planning (PlanRebuild), with hosts lost as the input's bytes say. What
// is checked: the room computed never wraps below a share's bytes; a
// rebuild names, per lost share, k distinct present shares of its stripe
// and a rebuilder among the load's hosts, which then holds the lost files.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/planning/replica_placement.h"
#include "daemon/tier/memory_plan_check.h"
#include "tests/fuzz/fuzz_support.h"

namespace ckpt::fuzz {
namespace {

constexpr uint64_t kBlock = 64 << 10;

void CheckRebuild(const v1::ErasurePlan& stripes, uint32_t lost_bits) {
  std::set<std::string> hosts;
  for (const v1::ErasureStripe& stripe : stripes.stripes()) {
    for (const v1::ErasureShare& share : stripe.shares()) hosts.insert(share.host());
  }
  // Hosts lost by the input's bits; the others hold their files.
  std::set<std::string> load_hosts;
  planning::FileHolders holders;
  int i = 0;
  for (const std::string& host : hosts) {
    const bool lost = (lost_bits >> (i++ % 32)) & 1;
    if (!lost || (lost_bits >> 31)) load_hosts.insert(host);  // a replacement, or gone
    if (lost) continue;
    for (const v1::ErasureStripe& stripe : stripes.stripes()) {
      for (const v1::ErasureShare& share : stripe.shares()) {
        if (share.host() != host) continue;
        for (const v1::ReplicaFile& f : share.files()) holders[f.name()].insert(host);
      }
    }
  }
  absl::StatusOr<v1::ErasureRebuild> rebuild = planning::PlanRebuild(stripes, load_hosts, holders);
  if (!rebuild.ok()) return;
  const int k = static_cast<int>(stripes.k());
  for (const v1::StripeRebuild& sr : rebuild->stripes()) {
    const v1::ErasureStripe& stripe = sr.stripe();
    CKPT_FUZZ_CHECK(sr.lost_size() == 1, "a rebuild of several shares at once");
    CKPT_FUZZ_CHECK(sr.lost(0) < static_cast<uint32_t>(k), "a rebuilt share that is not data");
    std::set<uint32_t> sources(sr.sources().begin(), sr.sources().end());
    CKPT_FUZZ_CHECK(static_cast<int>(sources.size()) == k && sr.sources_size() == k,
                    absl::StrCat("a rebuild from ", sources.size(), " shares, k = ", k));
    for (uint32_t s : sources) {
      CKPT_FUZZ_CHECK(s < static_cast<uint32_t>(stripe.shares_size()) && s != sr.lost(0),
                      "a source outside the stripe, or the lost share itself");
    }
    CKPT_FUZZ_CHECK(load_hosts.count(sr.rebuilder()) == 1, "a rebuilder outside the load");
    for (const v1::ReplicaFile& f : stripe.shares(sr.lost(0)).files()) {
      CKPT_FUZZ_CHECK(holders[f.name()].count(sr.rebuilder()) == 1,
                      "a rebuilt file its rebuilder does not hold");
    }
  }
}

}  // namespace
}  // namespace ckpt::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckpt;  // NOLINT
  v1::SaveAssignment assignment;
  if (size < 4 || !assignment.ParseFromArray(data + 4, static_cast<int>(size - 4))) return 0;
  const uint32_t bits = static_cast<uint32_t>(data[0]) | static_cast<uint32_t>(data[1]) << 8 |
                        static_cast<uint32_t>(data[2]) << 16 | static_cast<uint32_t>(data[3]) << 24;
  const v1::ReplicaPlan& replicas = assignment.replicas();
  const uint64_t receive = tier::ReplicaBytesToReceive(replicas, fuzz::kBlock);
  for (const v1::ReplicaPeer& from : replicas.receive_from()) {
    for (const v1::ReplicaFile& f : from.files()) {
      CKPT_FUZZ_CHECK(receive >= f.bytes(), "the replicas' room wraps below a file's bytes");
    }
  }
  (void)tier::CheckReplicaPlan(replicas, receive);
  const v1::ErasurePlan& erasure = assignment.erasure();
  const absl::Status stripes = tier::CheckStripes(erasure.k(), erasure.m(), erasure.piece_bytes(),
                                                  erasure.secret(), erasure.stripes());
  for (const v1::ErasureStripe& stripe : erasure.stripes()) {
    for (const v1::ErasureShare& share : stripe.shares()) {
      const uint64_t parity = tier::ParityBytesToHold(erasure, share.host(), fuzz::kBlock);
      if (stripes.ok()) {
        CKPT_FUZZ_CHECK(parity % fuzz::kBlock == 0 || parity == ~uint64_t{0},
                        "parity room not in whole blocks");
      }
    }
  }
  // The coordinator reads the stripes back from its own memory: fuzzed all
  // the same, whether or not a node would accept them.
  fuzz::CheckRebuild(erasure, bits);
  return 0;
}
