#include "daemon/tier/memory_plan_check.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/peer/peer_wire.h"
#include "daemon/storage/backend.h"
#include "daemon/tier/erasure_code.h"

namespace ckpt::tier {
namespace {

constexpr uint32_t kMaxStripes = 4096;  // the stripe number's room in a token
constexpr uint64_t kMaxPieceBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxPieces = uint64_t{1} << 20;  // a piece number's room in a token

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t FilesBytes(const v1::ErasureShare& share) {
  uint64_t total = 0;
  for (const v1::ReplicaFile& f : share.files()) total += f.bytes();
  return total;
}

absl::Status CheckPeer(const v1::ReplicaPeer& peer) {
  if (peer.index() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("replica host index ", peer.index()));
  }
  for (const v1::ReplicaFile& file : peer.files()) {
    if (!absl::StartsWith(file.name(), "data/") ||
        !storage::ValidateConfinedName(file.name().substr(5)).ok() ||
        file.name().find('/', 5) != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica file name ", file.name().substr(0, 128)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t ReplicaBytesToReceive(const v1::ReplicaPlan& plan, uint64_t block) {
  uint64_t total = 0;
  for (const v1::ReplicaPeer& from : plan.receive_from()) {
    for (const v1::ReplicaFile& file : from.files()) {
      const uint64_t rounded = AlignUp(file.bytes(), block);
      // Saturating: a hostile plan must not wrap around to a small total.
      if (rounded < file.bytes() || total + rounded < total) return ~uint64_t{0};
      total += rounded;
    }
  }
  return total;
}

absl::Status CheckReplicaPlan(const v1::ReplicaPlan& plan, uint64_t max_receive_bytes) {
  if (plan.send_to_size() == 0 && plan.receive_from_size() == 0) return absl::OkStatus();
  auto bad = [](const absl::Status& s) {
    return absl::InvalidArgumentError(
        absl::StrCat("the coordinator's replica plan is malformed: ", s.message()));
  };
  if (plan.piece_bytes() == 0 || plan.piece_bytes() > kMaxReplicaPieceBytes) {
    return bad(absl::InvalidArgumentError(absl::StrCat("piece of ", plan.piece_bytes(), " bytes")));
  }
  if (plan.secret().size() != peer::kTokenBytes / 2 || plan.index() > 65535) {
    return bad(absl::InvalidArgumentError("secret or host index"));
  }
  for (const v1::ReplicaPeer& peer : plan.send_to()) {
    if (absl::Status s = CheckPeer(peer); !s.ok()) return bad(s);
  }
  for (const v1::ReplicaPeer& peer : plan.receive_from()) {
    if (absl::Status s = CheckPeer(peer); !s.ok()) return bad(s);
  }
  if (ReplicaBytesToReceive(plan, 1) > max_receive_bytes) {
    return bad(absl::InvalidArgumentError(
        absl::StrCat("more bytes to receive than the ", max_receive_bytes, " planned")));
  }
  return absl::OkStatus();
}

namespace {

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("the coordinator's erasure-coding plan is malformed: ", what));
}

// The code's parameters and the transfers' secret.
absl::Status CheckCode(uint32_t k, uint32_t m, uint64_t piece_bytes, const std::string& secret,
                       int stripes) {
  if (k < 1 || m < 1 || k + m > static_cast<uint32_t>(tier::ErasureCode::kMaxShares)) {
    return Malformed(absl::StrCat("k=", k, " m=", m));
  }
  if (piece_bytes == 0 || piece_bytes > kMaxPieceBytes) {
    return Malformed(absl::StrCat("pieces of ", piece_bytes, " bytes"));
  }
  if (secret.size() != peer::kTokenBytes / 2) return Malformed("the secret");
  if (stripes > static_cast<int>(kMaxStripes)) return Malformed("too many stripes");
  return absl::OkStatus();
}

absl::Status CheckStripe(uint32_t k, uint32_t m, uint64_t piece_bytes,
                         const v1::ErasureStripe& stripe) {
  if (stripe.number() >= kMaxStripes || stripe.shares_size() != static_cast<int>(k + m)) {
    return Malformed(absl::StrCat("stripe ", stripe.number()));
  }
  if (stripe.unit_bytes() > piece_bytes * (kMaxPieces - 1)) {
    return Malformed(
        absl::StrCat("stripe ", stripe.number(), " of ", stripe.unit_bytes(), " bytes"));
  }
  for (const v1::ErasureShare& share : stripe.shares()) {
    for (const v1::ReplicaFile& f : share.files()) {
      const bool data = absl::StartsWith(f.name(), "data/");
      const bool parity = absl::StartsWith(f.name(), "parity/");
      const size_t slash = f.name().find('/');
      if ((!data && !parity) || f.name().find('/', slash + 1) != std::string::npos ||
          !storage::ValidateConfinedName(f.name().substr(slash + 1)).ok() ||
          f.bytes() > (uint64_t{1} << 50)) {
        return Malformed(absl::StrCat("file ", f.name().substr(0, 128)));
      }
    }
    const uint64_t files = FilesBytes(share);
    if (share.bytes() > stripe.unit_bytes() || share.offset() > files ||
        share.bytes() > files - share.offset() || share.files_size() > 1024) {
      return Malformed(
          absl::StrCat("a share of stripe ", stripe.number(), " on host ", share.host()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckStripes(uint32_t k, uint32_t m, uint64_t piece_bytes, const std::string& secret,
                          const google::protobuf::RepeatedPtrField<v1::ErasureStripe>& stripes) {
  if (stripes.empty()) return absl::OkStatus();
  if (absl::Status s = CheckCode(k, m, piece_bytes, secret, stripes.size()); !s.ok()) return s;
  for (const v1::ErasureStripe& stripe : stripes) {
    if (absl::Status s = CheckStripe(k, m, piece_bytes, stripe); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckRebuild(const v1::ErasureRebuild& rebuild) {
  if (rebuild.stripes().empty()) return absl::OkStatus();
  if (absl::Status s = CheckCode(rebuild.k(), rebuild.m(), rebuild.piece_bytes(), rebuild.secret(),
                                 rebuild.stripes_size());
      !s.ok()) {
    return s;
  }
  for (const v1::StripeRebuild& sr : rebuild.stripes()) {
    if (absl::Status s = CheckStripe(rebuild.k(), rebuild.m(), rebuild.piece_bytes(), sr.stripe());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

uint64_t ParityBytesToHold(const v1::ErasurePlan& plan, const std::string& host, uint64_t block) {
  uint64_t total = 0;
  // Unsigned: a k from the wire past INT_MAX must not index before share 0.
  const uint64_t k = plan.k();
  for (const v1::ErasureStripe& stripe : plan.stripes()) {
    for (uint64_t j = k; j < static_cast<uint64_t>(stripe.shares_size()); ++j) {
      if (stripe.shares(static_cast<int>(j)).host() != host) continue;
      const uint64_t rounded = AlignUp(stripe.unit_bytes(), block);
      if (rounded < stripe.unit_bytes() || total + rounded < total) return ~uint64_t{0};
      total += rounded;
    }
  }
  return total;
}

}  // namespace ckpt::tier
