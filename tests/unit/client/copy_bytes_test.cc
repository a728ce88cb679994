// The client's copies of tensor bytes (client/src/parallel_copy.h): with
// streaming stores from kStreamBytes on, every byte lands where memcpy would
// put it and nothing around the destination is touched, whatever the
// alignment of either end.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "client/src/parallel_copy.h"
#include "tests/catch.h"

namespace ckpt::client {
namespace {

constexpr size_t kGuard = 64;

std::vector<char> Pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> out(n);
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

}  // namespace

TEST_CASE("CopyBytes copies every byte and nothing past either end", "[copy]") {
  const size_t stream = kStreamBytes;
  const std::vector<size_t> lengths = {
      0,    1,          15,     16,         63,          64,          65,
      4097, stream - 1, stream, stream + 1, stream + 63, stream + 64, (3 << 20) + 17};
  for (size_t length : lengths) {
    for (size_t src_offset : {0, 1, 8, 15, 16, 33}) {
      for (size_t dst_offset : {0, 1, 7, 16, 31, 48}) {
        INFO("length " << length << " src+" << src_offset << " dst+" << dst_offset);
        const std::vector<char> src = Pattern(length + src_offset, static_cast<uint32_t>(length));
        std::vector<char> dst(length + dst_offset + 2 * kGuard, '\x5a');
        CopyBytes(dst.data() + kGuard + dst_offset, src.data() + src_offset, length);
        bool same = true;
        for (size_t i = 0; i < length && same; ++i) {
          same = dst[kGuard + dst_offset + i] == src[src_offset + i];
        }
        CHECK(same);
        bool untouched = true;
        for (size_t i = 0; i < kGuard + dst_offset; ++i) untouched &= dst[i] == '\x5a';
        for (size_t i = kGuard + dst_offset + length; i < dst.size(); ++i) {
          untouched &= dst[i] == '\x5a';
        }
        CHECK(untouched);
      }
    }
  }
}

TEST_CASE("ParallelCopy and CopyPool copy pieces of every size bit-exact", "[copy]") {
  // Pieces above and below the split (8 MiB) and the streaming threshold,
  // at odd offsets, back to back in one destination.
  const std::vector<size_t> sizes = {(9 << 20) + 5, 3, kStreamBytes + 1, 100000, (1 << 20) - 1};
  size_t total = 0;
  for (size_t s : sizes) total += s + 3;
  const std::vector<char> src = Pattern(total, 7);
  std::vector<CopyPiece> pieces;
  std::vector<char> by_threads(total, 0);
  std::vector<char> by_pool(total, 0);
  size_t at = 0;
  for (size_t s : sizes) {
    pieces.push_back({by_threads.data() + at + 1, src.data() + at + 2, s});
    at += s + 3;
  }
  ParallelCopy(pieces, 3);
  std::vector<CopyPiece> pool_pieces = pieces;
  for (size_t i = 0; i < pieces.size(); ++i) {
    pool_pieces[i].dst = by_pool.data() + (pieces[i].dst - by_threads.data());
  }
  CopyPool pool(2);
  pool.Start(pool_pieces);
  pool.Wait();
  at = 0;
  for (size_t s : sizes) {
    INFO("piece of " << s);
    CHECK(std::equal(src.begin() + at + 2, src.begin() + at + 2 + s, by_threads.begin() + at + 1));
    CHECK(std::equal(src.begin() + at + 2, src.begin() + at + 2 + s, by_pool.begin() + at + 1));
    CHECK(by_threads[at] == 0);  // the byte before each piece's destination
    CHECK(by_pool[at] == 0);
    at += s + 3;
  }
}

}  // namespace ckpt::client
