#include "proto/lib/copy_run.h"

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {

// offset + (n - 1) * stride + length <= limit, without wrapping.
bool Fits(uint64_t offset, uint64_t n, uint64_t stride, uint64_t length, uint64_t limit) {
  uint64_t last;
  if (__builtin_mul_overflow(n - 1, stride, &last)) return false;
  if (__builtin_add_overflow(last, offset, &last)) return false;
  if (__builtin_add_overflow(last, length, &last)) return false;
  return last <= limit;
}

}  // namespace

absl::Status CheckCopyRun(const v1::CopyRun& run, uint64_t chunk_length, uint64_t dest_length) {
  const uint64_t n = CopyRunRepetitions(run);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy run (chunk offset ", run.chunk_offset(), ", dest offset ", run.dest_offset(),
        ", length ", run.length(), ", count ", run.count(), ", strides ", run.chunk_stride(), "/",
        run.dest_stride(), ") of rank ", run.rank(), " request ", run.request(), " ", why));
  };
  if (n > 1 && (run.chunk_stride() < run.length() || run.dest_stride() < run.length())) {
    return bad("has repetitions that overlap");
  }
  if (!Fits(run.chunk_offset(), n, run.chunk_stride(), run.length(), chunk_length)) {
    return bad(absl::StrCat("reaches past the chunk's ", chunk_length, " bytes"));
  }
  if (!Fits(run.dest_offset(), n, run.dest_stride(), run.length(), dest_length)) {
    return bad(absl::StrCat("reaches past the destination's ", dest_length, " bytes"));
  }
  return absl::OkStatus();
}

void CopyStrided(const v1::CopyRun& run, const char* chunk, char* dest) {
  ForEachCopy(run, [&](uint64_t src, uint64_t dst, uint64_t length) {
    std::memcpy(dest + dst, chunk + src, length);
  });
}

}  // namespace ckpt
