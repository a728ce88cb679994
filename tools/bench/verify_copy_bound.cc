// What one machine allows a restore from memory that verifies every byte
// (issue "Memory tier", figure 6a): the fastest copy of the bytes (the
// client's CopyBytes, as ckpt-bench's floor), and that copy together with
// one CRC32C pass over the same bytes in the two ways a restore could do
// both, with nothing else running:
//   pipelined: one thread verifies 8 MiB pieces at most two ahead of
//     another that copies each once verified (ckptd verifying in place
//     while a rank copies);
//   fused: one thread verifies each 256 KiB block (it is then in the
//     core's cache) and copies it right after (a rank verifying as it
//     copies).
// A restore that verifies cannot beat the better of the two; ckpt-bench's
// memory_restore_over_memcpy is measured against the copy alone.
//
//   ckpt-verify-copy-bound [--gib G] [--rounds R] [--piece-mib P] [--lead L]
//
// --piece-mib and --lead (8 and 2) set the pipelined pieces and how many
// of them verification may run ahead of the copy (1: none ahead).
//
// Prints the medians over R rounds as one JSON line: copy_gbps, crc_gbps,
// pipelined_over_copy, fused_over_copy.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/src/parallel_copy.h"
#include "proto/lib/crc32c.h"
#include "tools/bench/median.h"

namespace {

constexpr size_t kBlock = 256 << 10;
// Pieces as the client splits copies (--piece-mib), and how many pieces
// verification may run ahead (--lead).
size_t piece_bytes = 8 << 20;
size_t lead_pieces = 2;

double Seconds(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

volatile uint32_t sink;  // keeps the CRCs computed

double Copy(char* dst, const char* src, size_t bytes) {
  const absl::Time start = absl::Now();
  for (size_t at = 0; at < bytes; at += piece_bytes) {
    ckpt::client::CopyBytes(dst + at, src + at, std::min(piece_bytes, bytes - at));
  }
  return Seconds(start);
}

double Crc(const char* src, size_t bytes) {
  const absl::Time start = absl::Now();
  sink = ckpt::Crc32c(src, bytes);
  return Seconds(start);
}

double Pipelined(char* dst, const char* src, size_t bytes) {
  const size_t pieces = (bytes + piece_bytes - 1) / piece_bytes;
  std::atomic<size_t> verified{0}, copied{0};
  const absl::Time start = absl::Now();
  std::thread verifier([&] {
    uint32_t crc = 0;
    for (size_t i = 0; i < pieces; ++i) {
      while (i >= copied.load(std::memory_order_acquire) + lead_pieces) std::this_thread::yield();
      crc ^= ckpt::Crc32c(src + i * piece_bytes, std::min(piece_bytes, bytes - i * piece_bytes));
      verified.store(i + 1, std::memory_order_release);
    }
    sink = crc;
  });
  for (size_t i = 0; i < pieces; ++i) {
    while (verified.load(std::memory_order_acquire) <= i) std::this_thread::yield();
    ckpt::client::CopyBytes(dst + i * piece_bytes, src + i * piece_bytes,
                            std::min(piece_bytes, bytes - i * piece_bytes));
    copied.store(i + 1, std::memory_order_release);
  }
  verifier.join();
  return Seconds(start);
}

double Fused(char* dst, const char* src, size_t bytes) {
  const absl::Time start = absl::Now();
  uint32_t crc = 0;
  for (size_t at = 0; at < bytes; at += kBlock) {
    const size_t n = std::min(kBlock, bytes - at);
    crc = ckpt::Crc32cExtend(crc, src + at, n);
    ckpt::client::CopyBytes(dst + at, src + at, n);
  }
  sink = crc;
  return Seconds(start);
}

char* Faulted(size_t bytes, int fill) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("ckpt-verify-copy-bound: mmap");
    std::exit(1);
  }
  std::memset(p, fill, bytes);
  return static_cast<char*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--gib" && i + 1 < argc) {
      gib = std::atof(argv[++i]);
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (arg == "--lead" && i + 1 < argc) {
      lead_pieces = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--piece-mib" && i + 1 < argc) {
      piece_bytes = std::strtoull(argv[++i], nullptr, 10) << 20;
    } else {
      std::fprintf(stderr, "usage: %s [--gib G] [--rounds R] [--piece-mib P] [--lead L]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!(gib > 0 && gib <= 64) || rounds < 1 || rounds > 100 || piece_bytes == 0 ||
      piece_bytes > (1ull << 30) || lead_pieces < 1) {
    std::fprintf(stderr,
                 "ckpt-verify-copy-bound: --gib in (0, 64], --rounds in [1, 100], --piece-mib in "
                 "[1, 1024], --lead at least 1\n");
    return 2;
  }
  const size_t bytes = static_cast<size_t>(gib * (1ull << 30)) / kBlock * kBlock;
  char* src = Faulted(bytes, 3);
  char* dst = Faulted(bytes, 1);
  std::vector<double> copy, crc, pipelined, fused;
  for (int r = 0; r < rounds; ++r) {
    // Each against the copy measured right before it: the machine's
    // memory bandwidth swings from second to second.
    const double c = Copy(dst, src, bytes);
    copy.push_back(bytes / c / 1e9);
    crc.push_back(bytes / Crc(src, bytes) / 1e9);
    pipelined.push_back(c / Pipelined(dst, src, bytes));
    fused.push_back(Copy(dst, src, bytes) / Fused(dst, src, bytes));
    std::fprintf(stderr,
                 "ckpt-verify-copy-bound: round %d: copy %.2f GB/s, crc %.2f GB/s, pipelined "
                 "%.3f, fused %.3f of the copy\n",
                 r, copy.back(), crc.back(), pipelined.back(), fused.back());
  }
  using ckpt::bench::Median;
  std::printf(
      "{\"mode\":\"verify_copy_bound\",\"gib\":%.3f,\"rounds\":%d,\"copy_gbps\":%.4f,"
      "\"crc_gbps\":%.4f,\"pipelined_over_copy\":%.4f,\"fused_over_copy\":%.4f}\n",
      gib, rounds, Median(copy), Median(crc), Median(pipelined), Median(fused));
  return 0;
}
