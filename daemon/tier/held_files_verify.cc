#include "daemon/tier/held_files_verify.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/coordinator/retention.h"
#include "daemon/fault/fault_points.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/storage/layout.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/stored_chunk.h"
#include "proto/lib/validation.h"

namespace ckpt::tier {
namespace {

using Mapped = std::shared_ptr<const storage::MemoryBackend::SharedFile>;

struct Chunk {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t crc32c = 0;
  std::string owner;
};

std::string Cut(std::string text) {
  if (text.size() > kMaxVerdictDetail) text.resize(kMaxVerdictDetail);
  return text;
}

// Flips the byte in the middle of `path` (tests: verify.flip_parity).
void FlipMiddle(storage::MemoryBackend& backend, const std::string& path) {
  absl::StatusOr<std::string> bytes = storage::ReadWholeFile(backend, path);
  if (!bytes.ok() || bytes->empty()) return;
  (*bytes)[bytes->size() / 2] ^= 0x01;
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> out = backend.NewWritableFile(path);
  if (!out.ok() || !(*out)->WriteAt(0, bytes->data(), bytes->size()).ok()) return;
  if ((*out)->Close().ok()) std::fprintf(stderr, "ckptd: flipped a byte of %s\n", path.c_str());
}

// Test builds' damage before the check (held_files_verify.h).
void DamageForTests(MemoryTier& tier, const std::string& job, int64_t step, const std::string& dir,
                    const std::vector<std::string>& held, const std::string& host) {
  const std::string own = absl::StrCat("data/", host, "-");
  for (const std::string& file : held) {
    const bool mine = absl::StartsWith(file, own);
    const bool parity = absl::StartsWith(file, "parity/");
    if (!mine && !parity && CorruptionPoint("verify.flip_replica")) {
      (void)tier.FlipByte(job, step, file);
      return;
    }
    if (parity && CorruptionPoint("verify.flip_parity")) {
      FlipMiddle(tier.backend(), absl::StrCat(dir, "/", file));
      return;
    }
    if (mine && CorruptionPoint("verify.drop_own")) {
      if (tier.backend().RemoveAll(absl::StrCat(dir, "/", file)).ok()) {
        std::fprintf(stderr, "ckptd: removed %s of job %s step %lld\n", file.c_str(), job.c_str(),
                     static_cast<long long>(step));
      }
      return;
    }
  }
}

std::vector<std::string> HeldFiles(storage::MemoryBackend& backend, const std::string& dir) {
  std::vector<std::string> held;
  for (const char* sub : {"data", "parity"}) {
    absl::StatusOr<std::vector<std::string>> names = backend.ListDir(absl::StrCat(dir, "/", sub));
    if (!names.ok()) continue;
    for (const std::string& name : *names) held.push_back(absl::StrCat(sub, "/", name));
  }
  std::sort(held.begin(), held.end());
  return held;
}

// The verdict on one data or parity file, given the chunks the manifest
// places in it.
v1::FileVerdict Check(const std::string& file, const Mapped& mapped,
                      const std::vector<Chunk>& chunks) {
  v1::FileVerdict verdict;
  verdict.set_file(file);
  for (const Chunk& chunk : chunks) {
    if (chunk.offset > mapped->size || chunk.length > mapped->size - chunk.offset) {
      verdict.set_state(v1::FileVerdict::FILE_CORRUPT);
      verdict.set_detail(
          Cut(absl::StrCat("the chunk at offset ", chunk.offset, ", ", chunk.length, " bytes (",
                           chunk.owner, ") lies past the file's end (", mapped->size, " bytes)")));
      return verdict;
    }
    if (Crc32c(mapped->data + chunk.offset, chunk.length) != chunk.crc32c) {
      verdict.set_state(v1::FileVerdict::FILE_CORRUPT);
      verdict.set_detail(Cut(absl::StrCat("the chunk at offset ", chunk.offset, ", ", chunk.length,
                                          " bytes (", chunk.owner, ") fails its CRC32C")));
      return verdict;
    }
    verdict.set_chunks(verdict.chunks() + 1);
    verdict.set_bytes(verdict.bytes() + chunk.length);
  }
  if (chunks.empty()) verdict.set_bytes(mapped->size);  // parity: its fold checks it
  return verdict;
}

// The fold of share `share` (its files laid end to end, its range of
// them), or nothing when a file of the range is not held whole here.
std::optional<std::string> FoldShare(const v1::ErasureShare& share,
                                     const std::map<std::string, Mapped>& mapped) {
  std::string fold(kFoldBytes, '\0');
  uint64_t start = 0;
  const uint64_t first = share.offset();
  const uint64_t last = share.offset() + share.bytes();
  for (const v1::ReplicaFile& f : share.files()) {
    const uint64_t end = start + f.bytes();
    const uint64_t lo = std::max(start, first);
    const uint64_t hi = std::min(end, last);
    if (lo < hi) {
      auto it = mapped.find(f.name());
      if (it == mapped.end() || it->second->size < hi - start) return std::nullopt;
      FoldInto(fold, lo - first, it->second->data + (lo - start), hi - lo);
    }
    start = end;
  }
  return fold;
}

}  // namespace

void FoldInto(std::string& fold, uint64_t position, const char* data, uint64_t length) {
  uint64_t i = 0;
  // Up to a block boundary byte by byte, then whole blocks word by word.
  for (; i < length && (position + i) % kFoldBytes != 0; ++i) {
    fold[(position + i) % kFoldBytes] ^= data[i];
  }
  for (; length - i >= kFoldBytes; i += kFoldBytes) {
    for (size_t w = 0; w < kFoldBytes; w += sizeof(uint64_t)) {
      uint64_t a;
      uint64_t b;
      std::memcpy(&a, fold.data() + w, sizeof a);
      std::memcpy(&b, data + i + w, sizeof b);
      a ^= b;
      std::memcpy(fold.data() + w, &a, sizeof a);
    }
  }
  for (; i < length; ++i) fold[(position + i) % kFoldBytes] ^= data[i];
}

v1::HostVerifyReport VerifyHeldFiles(MemoryTier& tier, const v1::VerifyOrder& order,
                                     const std::string& host) {
  v1::HostVerifyReport report;
  report.mutable_host()->set_host(host);
  report.set_round(order.round());
  const std::string& job = order.job();
  const int64_t step = order.step();
  if (absl::Status s = ValidateName("job", job); !s.ok() || step < 0) {
    report.set_error(Cut(absl::StrCat("a bad order: ", s.ok() ? "negative step" : s.message())));
    return report;
  }
  absl::StatusOr<bool> exists = tier.coordinator().catalog().StepExists(job, step);
  if (!exists.ok() || !*exists) return report;  // nothing held here
  absl::StatusOr<std::unique_ptr<storage::FileLock>> pin =
      coordinator::PinStep(tier.backend(), tier.coordinator().root(), job, step);
  if (absl::IsNotFound(pin.status())) return report;
  if (!pin.ok()) {
    report.set_error(Cut(absl::StrCat("cannot pin the step: ", pin.status().message())));
    return report;
  }
  report.set_step_held(true);
  absl::StatusOr<v1::CheckpointManifest> manifest =
      tier.coordinator().catalog().ReadManifest(job, step);
  if (!manifest.ok()) {
    report.set_error(Cut(absl::StrCat("its MANIFEST here: ", manifest.status().message())));
    return report;
  }
  const std::string dir = storage::StepDir(tier.coordinator().root(), job, step);
  storage::MemoryBackend& backend = tier.backend();
  DamageForTests(tier, job, step, dir, HeldFiles(backend, dir), host);
  std::vector<std::string> held = HeldFiles(backend, dir);
  if (static_cast<int>(held.size()) > kMaxReportFiles) {
    report.set_error(absl::StrCat("holds ", held.size(), " files of the step, more than the ",
                                  kMaxReportFiles, " a report names"));
    held.resize(kMaxReportFiles);
  }
  const std::set<std::string> names(held.begin(), held.end());
  std::map<std::string, std::vector<Chunk>> chunks;
  (void)planning::ForEachChunk(
      *manifest, [&](const v1::StoredChunk& chunk, const std::string& owner) {
        if (chunk.length() > 0 && names.contains(chunk.file())) {
          // As stored: an encoded chunk is checked without decoding it.
          chunks[chunk.file()].push_back(
              {chunk.file_offset(), StoredLength(chunk), StoredCrc32c(chunk), owner});
        }
        return absl::OkStatus();
      });
  std::map<std::string, Mapped> mapped;
  for (const std::string& file : held) {
    absl::StatusOr<Mapped> shared = backend.Share(absl::StrCat(dir, "/", file));
    if (!shared.ok() || ((*shared)->data == nullptr && (*shared)->size > 0)) {
      v1::FileVerdict* verdict = report.add_files();
      verdict->set_file(file);
      verdict->set_state(v1::FileVerdict::FILE_UNREADABLE);
      verdict->set_detail(
          Cut(shared.ok() ? "cannot be mapped now" : std::string(shared.status().message())));
      continue;
    }
    static const std::vector<Chunk> kNone;
    auto it = chunks.find(file);
    *report.add_files() = Check(file, *shared, it == chunks.end() ? kNone : it->second);
    mapped.emplace(file, *std::move(shared));
  }
  for (const v1::ErasureStripe& stripe : order.stripes()) {
    for (int i = 0; i < stripe.shares_size(); ++i) {
      if (stripe.shares(i).host() != host) continue;
      if (report.folds_size() == kMaxReportFolds) break;
      std::optional<std::string> fold = FoldShare(stripe.shares(i), mapped);
      if (!fold.has_value()) continue;  // a file of it is missing or short: named above
      v1::ShareFold* out = report.add_folds();
      out->set_stripe(stripe.number());
      out->set_share(static_cast<uint32_t>(i));
      out->set_fold(*std::move(fold));
    }
  }
  return report;
}

}  // namespace ckpt::tier
