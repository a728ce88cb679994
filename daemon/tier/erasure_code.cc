#include "daemon/tier/erasure_code.h"

#include <isa-l/erasure_code.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ckpt::tier {
namespace {

// ISA-L takes an int length, so buffers go to it in pieces. 1 MiB, far
// below INT_MAX, so that tests of a few MiB run the loop; one call per MiB
// is small next to the work it does.
constexpr size_t kPieceBytes = size_t{1} << 20;

// outputs[i] = sum over j of coefficient(i, j) * sources[j], byte by byte in
// GF(2^8), with the coefficients expanded by ec_init_tables.
void Apply(absl::Span<const uint8_t> tables, absl::Span<const uint8_t* const> sources,
           absl::Span<uint8_t* const> outputs, size_t length) {
  // ISA-L's pointers are not const, but it only reads the tables and sources.
  auto* gftbls = const_cast<unsigned char*>(tables.data());
  std::vector<unsigned char*> src(sources.size());
  std::vector<unsigned char*> dst(outputs.begin(), outputs.end());
  for (size_t offset = 0; offset < length; offset += kPieceBytes) {
    const size_t n = std::min(kPieceBytes, length - offset);
    for (size_t j = 0; j < sources.size(); ++j) {
      src[j] = const_cast<unsigned char*>(sources[j] + offset);
    }
    for (size_t i = 0; i < outputs.size(); ++i) dst[i] = outputs[i] + offset;
    ec_encode_data(static_cast<int>(n), static_cast<int>(src.size()), static_cast<int>(dst.size()),
                   gftbls, src.data(), dst.data());
  }
}

// An empty buffer may have no address (an empty vector's data()), so null
// only matters when there are bytes to read or write.
template <typename T>
absl::Status CheckPointers(absl::Span<T* const> pointers, size_t want, std::string_view what,
                           size_t length) {
  if (pointers.size() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "erasure code: %d %s share pointers given, need %d", pointers.size(), what, want));
  }
  if (length == 0) return absl::OkStatus();
  for (size_t i = 0; i < pointers.size(); ++i) {
    if (pointers[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("erasure code: %s share %d is null (length %d)", what, i, length));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ErasureCode> ErasureCode::Create(int k, int m) {
  if (k < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("erasure code: k = %d data shares, need at least 1", k));
  }
  if (m < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("erasure code: m = %d parity shares, need at least 1", m));
  }
  // A limit of ours, not of GF(2^8) (where a Cauchy code allows k + m up to
  // 256): a group is a handful of hosts, and the bound keeps the tables
  // (32 bytes per coefficient, 32 * k * m) and the k x k inversion each
  // rebuild runs small.
  if (static_cast<int64_t>(k) + m > kMaxShares) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "erasure code: k + m = %d + %d shares, at most %d in a group", k, m, kMaxShares));
  }
  // Cauchy rather than ISA-L's Vandermonde gf_gen_rs_matrix: with a Cauchy
  // matrix every square submatrix of the parity rows is invertible, so any k
  // surviving shares rebuild the rest; the Vandermonde one fails that for
  // some larger k and m.
  std::vector<uint8_t> matrix(static_cast<size_t>(k + m) * k);
  gf_gen_cauchy1_matrix(matrix.data(), k + m, k);
  // Scaling a column or a row of the parity rows by a non-zero factor
  // multiplies the determinants of the submatrices through it by that
  // factor, so they all stay invertible. Columns first, to make the first
  // parity row all ones (that share is the XOR of the data); then rows, to
  // make the first column all ones (with k = 1, each parity share is a copy).
  uint8_t* parity = matrix.data() + static_cast<size_t>(k) * k;
  for (int j = 0; j < k; ++j) {
    const uint8_t factor = gf_inv(parity[j]);
    for (int i = 0; i < m; ++i) parity[i * k + j] = gf_mul(parity[i * k + j], factor);
  }
  for (int i = 0; i < m; ++i) {
    const uint8_t factor = gf_inv(parity[i * k]);
    for (int j = 0; j < k; ++j) parity[i * k + j] = gf_mul(parity[i * k + j], factor);
  }
  return ErasureCode(k, m, std::move(matrix));
}

ErasureCode::ErasureCode(int k, int m, std::vector<uint8_t> matrix)
    : k_(k), m_(m), matrix_(std::move(matrix)), encode_tables_(32 * static_cast<size_t>(k) * m) {
  ec_init_tables(k, m, matrix_.data() + static_cast<size_t>(k) * k, encode_tables_.data());
}

absl::Status ErasureCode::Encode(absl::Span<const uint8_t* const> data,
                                 absl::Span<uint8_t* const> parity, size_t length) const {
  if (absl::Status s = CheckPointers(data, k_, "data", length); !s.ok()) return s;
  if (absl::Status s = CheckPointers(parity, m_, "parity", length); !s.ok()) return s;
  Apply(encode_tables_, data, parity, length);
  return absl::OkStatus();
}

absl::Status ErasureCode::Reconstruct(absl::Span<uint8_t* const> shares,
                                      absl::Span<const bool> present, size_t length) const {
  const int n = k_ + m_;
  if (absl::Status s = CheckPointers(shares, n, "data and parity", length); !s.ok()) return s;
  if (present.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "erasure code: %d presence flags given, need k + m = %d", present.size(), n));
  }
  // The first k present shares, data before parity: data rows of the
  // generator are the identity, which makes the inversion cheap.
  std::vector<int> survivors;
  std::vector<int> missing;
  int present_count = 0;
  for (int i = 0; i < n; ++i) {
    if (!present[i]) {
      missing.push_back(i);
    } else if (++present_count <= k_) {
      survivors.push_back(i);
    }
  }
  if (present_count < k_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("erasure code: %d of %d shares present, rebuilding needs at least k = %d",
                        present_count, n, k_));
  }
  if (missing.empty() || length == 0) return absl::OkStatus();

  // The survivors are their generator rows times the data, so the inverse of
  // those rows turns the survivors back into the data, and a missing share
  // is its own row times that inverse, applied to the survivors.
  const size_t k = k_;
  std::vector<uint8_t> rows(k * k);
  for (size_t r = 0; r < k; ++r) {
    std::memcpy(&rows[r * k], &matrix_[survivors[r] * k], k);
  }
  std::vector<uint8_t> inverse(k * k);
  if (gf_invert_matrix(rows.data(), inverse.data(), k_) != 0) {
    // Cannot happen with a Cauchy generator; a bug if it does.
    return absl::InternalError(absl::StrFormat(
        "erasure code: the generator rows of shares %s are singular (k = %d, m = %d)",
        absl::StrJoin(survivors, ","), k_, m_));
  }
  std::vector<uint8_t> coefficients(missing.size() * k);
  for (size_t i = 0; i < missing.size(); ++i) {
    const uint8_t* row = &matrix_[missing[i] * k];
    for (size_t j = 0; j < k; ++j) {
      uint8_t c = 0;
      for (size_t l = 0; l < k; ++l) c ^= gf_mul(row[l], inverse[l * k + j]);
      coefficients[i * k + j] = c;
    }
  }
  std::vector<uint8_t> tables(32 * k * missing.size());
  ec_init_tables(k_, static_cast<int>(missing.size()), coefficients.data(), tables.data());

  std::vector<const uint8_t*> sources(k);
  for (size_t r = 0; r < k; ++r) sources[r] = shares[survivors[r]];
  std::vector<uint8_t*> outputs(missing.size());
  for (size_t i = 0; i < missing.size(); ++i) outputs[i] = shares[missing[i]];
  Apply(tables, sources, outputs, length);
  return absl::OkStatus();
}

}  // namespace ckpt::tier
