#include "daemon/tier/held_step_check.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/retention.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/storage/layout.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/stored_chunk.h"

namespace ckpt::tier {
namespace {

struct HeldFile {
  std::shared_ptr<const storage::MemoryBackend::SharedFile> shared;
  FileStamp stamp;  // taken before its bytes are read
  uint64_t chunks = 0;
  std::string problem;     // empty while every chunk matched
  bool unchecked = false;  // could not be mapped now (no memory, no map entries): left to the load
};

struct ChunkTask {
  const char* data = nullptr;
  uint64_t length = 0;
  uint32_t crc32c = 0;
  HeldFile* file = nullptr;
  const v1::StoredChunk* chunk = nullptr;
  std::string owner;
};

}  // namespace

HeldStepCheck CheckHeldStep(tier::MemoryTier& tier, const std::string& job, int64_t wanted,
                            HeldSteps& held, int threads, BadFiles bad) {
  HeldStepCheck out;
  auto entry = held.end();
  for (auto it = held.begin(); it != held.end(); ++it) {
    const bool better =
        wanted >= 0 ? it->first == wanted : entry == held.end() || it->first > entry->first;
    if (better) entry = it;
  }
  if (entry == held.end() || entry->second.empty()) return out;
  const int64_t step = entry->first;
  // Pinned while checked: retention dropping it meanwhile would punch its
  // pages out from under the check (zeros, not a bad copy).
  absl::StatusOr<std::unique_ptr<storage::FileLock>> pin =
      coordinator::PinStep(tier.backend(), tier.coordinator().root(), job, step);
  if (!pin.ok()) return out;
  absl::StatusOr<v1::CheckpointManifest> manifest =
      tier.coordinator().catalog().ReadManifest(job, step);
  if (!manifest.ok()) return out;
  const std::string dir = storage::StepDir(tier.coordinator().root(), job, step);
  std::map<std::string, HeldFile> files;
  for (const std::string& name : entry->second) files.emplace(name, HeldFile{});
  std::vector<ChunkTask> tasks;
  (void)planning::ForEachChunk(
      *manifest, [&](const v1::StoredChunk& chunk, const std::string& owner) {
        auto it = files.find(chunk.file());
        if (chunk.length() == 0 || it == files.end()) return absl::OkStatus();
        HeldFile& file = it->second;
        ++file.chunks;
        if (!file.problem.empty() || file.unchecked) return absl::OkStatus();
        if (file.shared == nullptr) {
          // A resource running short says nothing of the bytes: the load
          // verifies them as it reads.
          auto shared = tier.backend().Share(absl::StrCat(dir, "/", chunk.file()));
          std::optional<FileStamp> stamp;
          if (shared.ok() && (*shared)->data != nullptr) stamp = StampOf((*shared)->fd);
          if (!stamp.has_value()) {
            file.unchecked = true;
            return absl::OkStatus();
          }
          file.shared = *std::move(shared);
          file.stamp = *stamp;
        }
        const uint64_t size = file.shared->size;
        // As stored: an encoded chunk is checked without decoding it.
        const uint64_t stored = StoredLength(chunk);
        if (chunk.file_offset() > size || stored > size - chunk.file_offset()) {
          file.problem = absl::StrCat(owner, ": its chunk at offset ", chunk.file_offset(),
                                      " lies past the file's end (", size, " bytes)");
          return absl::OkStatus();
        }
        tasks.push_back({file.shared->data + chunk.file_offset(), stored, StoredCrc32c(chunk),
                         &file, &chunk, owner});
        return absl::OkStatus();
      });
  // The largest first, so the threads end together.
  std::sort(tasks.begin(), tasks.end(),
            [](const ChunkTask& a, const ChunkTask& b) { return a.length > b.length; });
  absl::Mutex mu;
  std::atomic<size_t> next{0};
  auto verify = [&] {
    for (size_t i = next.fetch_add(1); i < tasks.size(); i = next.fetch_add(1)) {
      const ChunkTask& task = tasks[i];
      {
        absl::MutexLock lock(&mu);
        if (!task.file->problem.empty()) continue;  // one failure sets the file aside
      }
      if (Crc32c(task.data, task.length) == task.crc32c) continue;
      absl::MutexLock lock(&mu);
      if (task.file->problem.empty()) {
        task.file->problem = absl::StrCat(task.owner, ": its chunk at offset ",
                                          task.chunk->file_offset(), " fails its CRC32C");
      }
    }
  };
  const int helpers = std::clamp<int>(threads, 1, 8) - 1;
  std::vector<std::thread> running;
  for (int t = 0; t < helpers && static_cast<size_t>(t + 1) < tasks.size(); ++t) {
    running.emplace_back(verify);
  }
  verify();
  for (std::thread& t : running) t.join();

  out.step = step;
  for (auto& [name, file] : files) {
    if (file.unchecked) continue;
    if (file.problem.empty()) {
      out.verified.emplace(name, file.stamp);
      continue;
    }
    if (bad == BadFiles::kLeaveToLoad) {
      std::fprintf(stderr,
                   "ckptd: memory-check job=%s step=%lld file=%s: %s; the load verifies it "
                   "again where it lies\n",
                   job.c_str(), static_cast<long long>(step), name.c_str(), file.problem.c_str());
      file.problem.clear();  // kept in `held`
      continue;
    }
    if (!tier.SetAside(job, step, name)) {
      // Too many set aside already: offered as it is, the load's own check
      // fails closed on it.
      std::fprintf(stderr,
                   "ckptd: memory-check job=%s step=%lld file=%s: %s; not set aside (%zu "
                   "files are already)\n",
                   job.c_str(), static_cast<long long>(step), name.c_str(), file.problem.c_str(),
                   tier::MemoryTier::kMaxSetAside);
      file.problem.clear();
      continue;
    }
    out.bad_chunks += std::max<uint64_t>(file.chunks, 1);
    std::fprintf(stderr,
                 "ckptd: memory-check job=%s step=%lld file=%s: %s; set aside, the load takes "
                 "it from another copy\n",
                 job.c_str(), static_cast<long long>(step), name.c_str(), file.problem.c_str());
  }
  std::vector<std::string>& names = entry->second;
  names.erase(std::remove_if(names.begin(), names.end(),
                             [&](const std::string& n) {
                               auto it = files.find(n);
                               return it != files.end() && !it->second.problem.empty();
                             }),
              names.end());
  return out;
}

}  // namespace ckpt::tier
