// Splitting copies where a registration ends: CUDA refuses a copy whose
// host side crosses from one cudaHostRegister'ed range into another.
#include "gpu/registered_ranges.h"

#include <vector>

#include "tests/catch.h"

namespace ckpt::gpu {
namespace {

// The pieces PieceAt cuts [at, at + bytes) into.
std::vector<uint64_t> Pieces(const RegisteredRanges& r, uintptr_t at, uint64_t bytes) {
  std::vector<uint64_t> out;
  while (bytes > 0) {
    const uint64_t n = r.PieceAt(at, bytes);
    REQUIRE(n > 0);
    REQUIRE(n <= bytes);
    out.push_back(n);
    at += n;
    bytes -= n;
  }
  return out;
}

TEST_CASE("copies split at registration boundaries", "[unit]") {
  RegisteredRanges r;
  // Adjacent segments of 100 bytes from 1000, then a gap, then one at 1400.
  r.Add(1000, 100);
  r.Add(1100, 100);
  r.Add(1200, 100);
  r.Add(1400, 50);
  CHECK(Pieces(r, 1010, 50) == std::vector<uint64_t>{50});            // inside one
  CHECK(Pieces(r, 1090, 20) == std::vector<uint64_t>{10, 10});        // across adjacent ones
  CHECK(Pieces(r, 1050, 200) == std::vector<uint64_t>{50, 100, 50});  // across three
  CHECK(Pieces(r, 1290, 150) == std::vector<uint64_t>{10, 100, 40});  // into the gap and beyond
  CHECK(Pieces(r, 500, 100) == std::vector<uint64_t>{100});           // nothing registered
  CHECK(Pieces(r, 900, 150) == std::vector<uint64_t>{100, 50});       // from before the first
  CHECK(Pieces(r, 1440, 100) == std::vector<uint64_t>{10, 90});       // past the last
  r.Remove(1100);
  CHECK(Pieces(r, 1090, 120) == std::vector<uint64_t>{10, 100, 10});  // a hole where it was
  r.Remove(12345);                                                    // unknown: no-op
  CHECK(Pieces(r, 1000, 100) == std::vector<uint64_t>{100});
}

}  // namespace
}  // namespace ckpt::gpu
