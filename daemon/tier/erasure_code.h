// Reed-Solomon erasure coding for the memory tier: a group of k hosts each
// holds one data share (its checkpoint), m other hosts hold parity shares,
// and the group survives the loss of any m hosts at a memory cost of
// (k + m) / k.
//
// The code is systematic (data shares are stored as they are) over GF(2^8),
// with ISA-L doing the arithmetic. Its generator is a Cauchy matrix, scaled
// so that the first parity share is the XOR of the data shares and, when
// k = 1, every parity share is a plain copy of the data (replication). The
// coefficients are part of what other hosts store: changing them makes
// parity written before unreadable.
//
// All shares of one encoding have the same length. Data shares of different
// lengths are the caller's business: pad each to the longest with zeros, and
// keep the true lengths beside the shares to cut the padding off after a
// rebuild.
//
// Buffers need no alignment. Thread-safety: an ErasureCode is immutable once
// created; its methods are safe from any thread at once (on distinct output
// buffers).
#ifndef CKPT_DAEMON_TIER_ERASURE_CODE_H_
#define CKPT_DAEMON_TIER_ERASURE_CODE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ckpt::tier {

class ErasureCode {
 public:
  // The most shares, data and parity together, in one group.
  static constexpr int kMaxShares = 32;

  // INVALID_ARGUMENT naming the bad value unless 1 <= k, 1 <= m and
  // k + m <= kMaxShares.
  static absl::StatusOr<ErasureCode> Create(int k, int m);

  int k() const { return k_; }
  int m() const { return m_; }

  // Computes the m parity shares of the k data shares, each `length` bytes.
  // INVALID_ARGUMENT when the pointer counts are not k and m, or a pointer
  // is null while length > 0.
  absl::Status Encode(absl::Span<const uint8_t* const> data, absl::Span<uint8_t* const> parity,
                      size_t length) const;

  // Rebuilds in place every share (data or parity) that present[i] marks
  // missing, from k of the present ones. `shares` holds k + m pointers, the
  // data shares first, then the parity shares, each `length` bytes.
  // FAILED_PRECONDITION when fewer than k shares are present (nothing is
  // written then); INVALID_ARGUMENT when the counts are not k + m or a
  // pointer is null while length > 0.
  absl::Status Reconstruct(absl::Span<uint8_t* const> shares, absl::Span<const bool> present,
                           size_t length) const;

 private:
  ErasureCode(int k, int m, std::vector<uint8_t> matrix);

  int k_;
  int m_;
  // The (k + m) x k generator, row-major: the identity, then the parity rows.
  std::vector<uint8_t> matrix_;
  // ISA-L's expanded tables for the parity rows (32 bytes per coefficient).
  std::vector<uint8_t> encode_tables_;
};

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_ERASURE_CODE_H_
