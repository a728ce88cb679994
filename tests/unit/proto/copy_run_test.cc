#include "proto/lib/copy_run.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tests/catch.h"

namespace ckpt {
namespace {

v1::CopyRun Run(uint64_t src, uint64_t dst, uint64_t length, uint64_t count = 0,
                uint64_t src_stride = 0, uint64_t dst_stride = 0) {
  v1::CopyRun r;
  r.set_chunk_offset(src);
  r.set_dest_offset(dst);
  r.set_length(length);
  r.set_count(count);
  r.set_chunk_stride(src_stride);
  r.set_dest_stride(dst_stride);
  return r;
}

TEST_CASE("copy run: single and strided copies", "[copy_run]") {
  const std::string chunk = "abcdefghijklmnop";
  std::string dest(8, '.');
  // count 0 (an old plan) and 1 are one run.
  CHECK(CopyRunRepetitions(Run(0, 0, 2)) == 1);
  CHECK(CopyRunRepetitions(Run(0, 0, 2, 1, 99, 99)) == 1);
  REQUIRE(CheckCopyRun(Run(1, 0, 2), chunk.size(), dest.size()).ok());
  CopyStrided(Run(1, 0, 2), chunk.data(), dest.data());
  CHECK(dest == "bc......");
  // A column: every 4th byte of the chunk into consecutive bytes.
  const v1::CopyRun column = Run(3, 2, 1, 4, 4, 1);
  REQUIRE(CheckCopyRun(column, chunk.size(), dest.size()).ok());
  CopyStrided(column, chunk.data(), dest.data());
  CHECK(dest == "bcdhlp..");
  std::vector<uint64_t> seen;
  ForEachCopy(column, [&](uint64_t s, uint64_t d, uint64_t n) {
    seen.insert(seen.end(), {s, d, n});
  });
  CHECK(seen == std::vector<uint64_t>{3, 2, 1, 7, 3, 1, 11, 4, 1, 15, 5, 1});
}

TEST_CASE("copy run: bounds are checked without iterating", "[copy_run]") {
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  CHECK(CheckCopyRun(Run(3, 2, 1, 4, 4, 1), 16, 6).ok());
  CHECK(CheckCopyRun(Run(3, 2, 1, 4, 4, 1), 15, 6).code() == absl::StatusCode::kInvalidArgument);
  CHECK(CheckCopyRun(Run(3, 2, 1, 4, 4, 1), 16, 5).code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(CheckCopyRun(Run(0, 0, 4, 3, 2, 4), 64, 64).message()),
             Catch::Contains("overlap"));
  // Wrapping offsets and counts are refused, not iterated.
  CHECK_FALSE(CheckCopyRun(Run(kMax - 1, 0, 4), 16, 16).ok());
  CHECK_FALSE(CheckCopyRun(Run(0, 0, 1, kMax, 1, 1), 16, 16).ok());
  CHECK_FALSE(CheckCopyRun(Run(0, 0, 1, 3, kMax / 2 + 1, 1), kMax, 16).ok());
  CHECK(CheckCopyRun(Run(0, 0, 0), 0, 0).ok());
}

}  // namespace
}  // namespace ckpt
