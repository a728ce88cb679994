#include "daemon/tier/memory_tier.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/retention.h"
#include "daemon/fault/fault_points.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/replica_placement.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/layout.h"
#include "proto/lib/align.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/status_context.h"
#include "proto/lib/stored_chunk.h"

namespace ckpt::tier {
namespace {

// Pieces a persisted file is copied in: large enough for storage to stream,
// small enough to be one allocation of the persister thread.
constexpr size_t kCopyPieceBytes = 8 << 20;
// O_DIRECT wants aligned buffers; 4 KiB suits every block device here.
constexpr size_t kCopyAlignment = 4096;

void Log(const std::string& line) { std::fprintf(stderr, "ckptd: %s\n", line.c_str()); }

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// A chunk of a persisted file: where it is, and what it must hold.
struct ChunkToCopy {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t crc32c = 0;
  std::string owner;
};

// One file's chunks, each read from memory, checked against its CRC and
// written at the same offset; the copy is fsynced. The padding after a chunk
// goes with it where the file holds it, so storage gets whole aligned blocks
// (direct I/O) and the same layout. A chunk that fails its CRC stops the
// copy: memory that went bad is never made durable.
absl::Status CopyFile(storage::Backend& from, const std::string& from_path, storage::Backend& to,
                      const std::string& to_path, std::vector<ChunkToCopy>& chunks) {
  std::sort(chunks.begin(), chunks.end(),
            [](const ChunkToCopy& a, const ChunkToCopy& b) { return a.offset < b.offset; });
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> in = from.NewReadableFile(from_path);
  if (!in.ok()) return in.status();
  absl::StatusOr<uint64_t> size = (*in)->Size();
  if (!size.ok()) return size.status();
  for (const ChunkToCopy& c : chunks) {
    if (c.offset > *size || c.length > *size - c.offset) {
      return absl::DataLossError(
          absl::StrFormat("%s ends at %d bytes, before the chunk of %s at offset %d (%d bytes)",
                          from_path, *size, c.owner, c.offset, c.length));
    }
  }
  // One piece at a time, whatever a chunk's size (an object may be GiBs):
  // the copy's memory is outside the tier's budget.
  std::unique_ptr<char, FreeDeleter> buffer(
      static_cast<char*>(std::aligned_alloc(kCopyAlignment, kCopyPieceBytes)));
  if (buffer == nullptr) return absl::ResourceExhaustedError("no memory for the copy buffer");
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> out = to.NewWritableFile(to_path);
  if (!out.ok()) return out.status();
  for (const ChunkToCopy& c : chunks) {
    const uint64_t padded = std::min(AlignUp(c.length, kCopyAlignment), *size - c.offset);
    uint32_t crc = 0;
    // Written before the CRC is known: a chunk that fails it fails the copy,
    // whose partial directory is then removed, never committed.
    for (uint64_t done = 0; done < padded;) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(kCopyPieceBytes, padded - done));
      absl::StatusOr<size_t> n = (*in)->ReadAt(c.offset + done, buffer.get(), piece);
      if (!n.ok()) return n.status();
      if (*n != piece) {
        return absl::DataLossError(
            absl::StrFormat("short read %s at offset %d", from_path, c.offset + done));
      }
      if (done < c.length) {
        crc = Crc32cExtend(crc, buffer.get(), std::min<uint64_t>(piece, c.length - done));
      }
      if (absl::Status s = (*out)->WriteAt(c.offset + done, buffer.get(), piece); !s.ok()) {
        return s;
      }
      done += piece;
    }
    if (crc != c.crc32c) {
      return absl::DataLossError(
          absl::StrFormat("the chunk of %s at %s offset %d fails its CRC32C in the memory tier",
                          c.owner, from_path, c.offset));
    }
  }
  if (absl::Status s = (*out)->Sync(); !s.ok()) return s;
  return (*out)->Close();
}

// This host's part of the durable copy of a step spread over hosts
// (spread_persist.h): opens it at the coordinator, copies this host's own
// data files of the step (data/<host>-*) from memory into the directory
// the coordinator names, and reports them (or the error), which waits for
// every host's. No directory is made here: one the coordinator removed
// (the copy failed on another host) stays gone.
absl::Status PersistSpreadPart(const MemoryTier::SpreadPersistence& spread,
                               const v1::CheckpointManifest& manifest, storage::Backend& from,
                               const std::string& step_dir, storage::Backend& to,
                               const std::string& to_root,
                               std::map<std::string, std::vector<ChunkToCopy>>& by_file) {
  if (!spread.open || !spread.report) {
    return absl::FailedPreconditionError(
        absl::StrCat("the step is spread over ", manifest.topology().hosts_size(),
                     " hosts and this ckptd belongs to no cluster (--coordinator_address)"));
  }
  v1::SpreadPersistOpen open;
  open.mutable_host()->set_host(spread.host);
  open.set_manifest(manifest.SerializeAsString());
  absl::StatusOr<v1::SpreadPersistDir> dir = spread.open(open);
  if (!dir.ok()) return WithContext(dir.status(), "the coordinator");
  // The coordinator names a partial directory of the step's job, nothing else.
  absl::string_view name = dir->partial_dir();
  if (!absl::ConsumePrefix(&name, absl::StrCat(manifest.job(), "/")) ||
      !storage::IsPartialDirName(name)) {
    return absl::InternalError(absl::StrCat("the coordinator named ",
                                            dir->partial_dir().substr(0, 256),
                                            ", not a partial directory of job ", manifest.job()));
  }
  const std::string to_dir = absl::StrCat(to_root, "/", dir->partial_dir());
  const std::string mine = absl::StrCat("data/", spread.host, "-");
  v1::SpreadPersistCopied report;
  report.mutable_host()->set_host(spread.host);
  report.set_persist_id(dir->persist_id());
  absl::Status status;
  for (auto& [file, chunks] : by_file) {
    if (!absl::StartsWith(file, mine)) continue;
    report.add_files(file);
    status = CopyFile(from, absl::StrCat(step_dir, "/", file), to, absl::StrCat(to_dir, "/", file),
                      chunks);
    if (!status.ok()) break;
  }
  if (status.ok() && report.files_size() > 0) status = to.SyncDir(absl::StrCat(to_dir, "/data"));
  // Tests kill ckptd here: its files are on storage, not reported.
  if (status.ok()) FaultPoint("persist.spread_copied");
  if (!status.ok()) {
    // Its own files go; the coordinator removes the directory.
    for (const std::string& file : report.files()) {
      (void)to.RemoveAll(absl::StrCat(to_dir, "/", file));
    }
    report.clear_files();
    report.set_error(std::string(status.message()).substr(0, 1024));
  }
  absl::StatusOr<v1::SpreadPersistResult> committed = spread.report(report);
  if (!status.ok()) return WithContext(status, absl::StrCat("host ", spread.host, "'s files"));
  return committed.status();
}

}  // namespace

MemoryTier::MemoryTier(MemoryTierOptions options, planning::SavePlannerOptions planner,
                       coordinator::CatalogOptions catalog,
                       coordinator::RendezvousOptions rendezvous, coordinator::Coordinator& durable)
    : options_(options), durable_(durable) {
  storage::MemoryBackendOptions memory;
  memory.budget_bytes = options_.budget_bytes;
  memory.block_bytes = kBlockBytes;
  backend_ = std::make_unique<storage::MemoryBackend>(memory);
  (void)backend_->CreateDirs(kRoot);
  // Steps of jobs spread over hosts are here in part (this host's files
  // and its replicas).
  catalog.files_elsewhere = true;
  // Its manifests travel whole (to peers, to a new leader): one file each.
  catalog.split_manifest_min_chunks = 0;
  coordinator_ = std::make_unique<coordinator::Coordinator>(*backend_, kRoot, planner,
                                                            std::move(catalog), rendezvous);
  planning::RetentionConfig retention;
  retention.defaults.keep_last = std::max(1, options_.keep_steps);
  // Memory is not kept for a grace period: the budget is the point.
  retention.defaults.grace = absl::ZeroDuration();
  retention.trigger = "memory tier retention";
  coordinator_->EnableRetention(retention);
  persister_ = std::thread([this] { RunPersists(); });
}

MemoryTier::~MemoryTier() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  persister_.join();
}

MemoryTier::Room::~Room() {
  absl::MutexLock lock(&tier_.room_mu_);
  tier_.reserved_ -= bytes_;
}

uint64_t MemoryTier::SaveBytes(const v1::HostAssignment& host, uint64_t manifest_bytes) const {
  const uint64_t block = kBlockBytes;
  uint64_t total = 0;
  // Each data file to the end of its last item (what a replica copies).
  const v1::ReplicaPeer files = planning::ReplicaFilesOf(host);
  for (const v1::ReplicaFile& f : files.files()) {
    total += AlignUp(f.bytes(), block);
  }
  // MANIFEST (its checksums and trailer added at commit), LATEST, and
  // LATEST's temporary and intent files while it is replaced.
  // Checksums filled in at commit grow a chunk's entry by up to a fifth.
  return total + AlignUp(manifest_bytes + (manifest_bytes >> 2) + 4096, block) + 3 * block;
}

uint64_t MemoryTier::BytesUnder(const std::string& dir) const {
  const uint64_t block = kBlockBytes;
  absl::StatusOr<std::vector<std::string>> names = backend_->ListDir(dir);
  if (!names.ok()) return 0;
  uint64_t total = 0;
  for (const std::string& name : *names) {
    const std::string path = absl::StrCat(dir, "/", name);
    absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file = backend_->NewReadableFile(path);
    if (!file.ok()) {
      total += BytesUnder(path);  // a directory
      continue;
    }
    absl::StatusOr<uint64_t> size = (*file)->Size();
    if (size.ok()) total += AlignUp(*size, block);
  }
  return total;
}

uint64_t MemoryTier::BytesBeingWritten() const {
  uint64_t total = 0;
  absl::StatusOr<std::vector<std::string>> jobs = backend_->ListDir(kRoot);
  if (!jobs.ok()) return 0;
  for (const std::string& job : *jobs) {
    const std::string dir = storage::JobDir(kRoot, job);
    absl::StatusOr<std::vector<std::string>> entries = backend_->ListDir(dir);
    if (!entries.ok()) continue;
    for (const std::string& entry : *entries) {
      if (storage::IsPartialDirName(entry)) total += BytesUnder(absl::StrCat(dir, "/", entry));
    }
  }
  return total;
}

uint64_t MemoryTier::UsedLocked() const {
  // What is written of saves in flight is in their rooms already.
  const uint64_t held = bytes_held();
  const uint64_t writing = std::min(held, BytesBeingWritten());
  return held - writing + reserved_;
}

absl::StatusOr<std::unique_ptr<MemoryTier::Room>> MemoryTier::Reserve(const std::string& job,
                                                                      uint64_t bytes) {
  const uint64_t budget = options_.budget_bytes;
  if (bytes > budget) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this host's part of the save needs %d bytes of memory; the memory tier's budget is %d "
        "(--memory_tier_bytes)",
        bytes, budget));
  }
  absl::MutexLock lock(&room_mu_);
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(room_mu_) {
    return UsedLocked() <= budget - bytes;
  };
  if (!fits()) {
    planning::RetentionPolicy newest;
    newest.keep_last = 1;
    newest.grace = absl::ZeroDuration();
    // The job's own older steps first: they are what this save replaces.
    std::vector<std::string> jobs = {job};
    if (absl::StatusOr<std::vector<std::string>> all = backend_->ListDir(kRoot); all.ok()) {
      for (const std::string& other : *all) {
        if (other != job) jobs.push_back(other);
      }
    }
    for (const std::string& j : jobs) {
      // Pinned steps (being read or waiting to be persisted) are kept; a
      // job with nothing committed has nothing to drop.
      (void)coordinator_->garbage_collector().Collect(j, newest, /*dry_run=*/false, absl::Now(),
                                                      "memory tier budget");
      if (fits()) break;
    }
  }
  if (!fits()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the memory tier holds or has promised %d bytes and this host's part of the save needs "
        "%d more; its budget is %d (--memory_tier_bytes). Each job's newest step, steps being "
        "read or persisted, and saves in flight stay: raise the budget, or save to memory less "
        "often",
        UsedLocked(), bytes, budget));
  }
  reserved_ += bytes;
  return std::make_unique<Room>(*this, bytes);
}

void MemoryTier::PersistLater(const std::string& job, int64_t step, std::shared_ptr<void> hold) {
  absl::StatusOr<std::unique_ptr<storage::FileLock>> pin =
      coordinator::PinStep(*backend_, kRoot, job, step);
  absl::MutexLock lock(&mu_);
  if (!pin.ok()) {
    ++persist_failed_;
    Log(absl::StrFormat("persist job=%s step=%d outcome=failed error=\"%s\"", job, step,
                        pin.status().message()));
    return;
  }
  persists_.push_back(Queued{job, step, std::move(*pin), std::move(hold)});
}

absl::Status MemoryTier::Persist(const std::string& job, int64_t step) {
  const std::string who = absl::StrCat("persisting step ", step, " of job ", job, " from memory");
  // Pinned: neither retention nor the budget drops it while it is copied.
  absl::StatusOr<std::unique_ptr<storage::FileLock>> pin =
      coordinator::PinStep(*backend_, kRoot, job, step);
  if (!pin.ok()) return WithContext(pin.status(), who);
  absl::StatusOr<v1::CheckpointManifest> manifest = coordinator_->catalog().ReadManifest(job, step);
  if (!manifest.ok()) return WithContext(manifest.status(), who);
  std::map<std::string, std::vector<ChunkToCopy>> by_file;
  if (absl::Status s = planning::ForEachChunk(
          *manifest,
          [&](const v1::StoredChunk& chunk, const std::string& owner) {
            // 0-byte items have no bytes in any file.
            if (chunk.length() > 0) {
              // As stored: an encoded chunk is copied and checked encoded.
              by_file[chunk.file()].push_back(
                  {chunk.file_offset(), StoredLength(chunk), StoredCrc32c(chunk), owner});
            }
            return absl::OkStatus();
          });
      !s.ok()) {
    return WithContext(s, who);
  }
  const std::string dir = storage::StepDir(kRoot, job, step);
  storage::Backend& to = durable_.backend();
  if (manifest->topology().hosts_size() > 1) {
    SpreadPersistence spread;
    {
      absl::MutexLock lock(&mu_);
      spread = spread_;
    }
    return WithContext(
        PersistSpreadPart(spread, *manifest, *backend_, dir, to, durable_.root(), by_file), who);
  }
  auto copy = [&](const std::string& partial) -> absl::Status {
    // The manifest's file names were checked when it was read (confined to
    // the step directory), so they name the same place in both stores.
    std::set<std::string> dirs;
    for (auto& [name, chunks] : by_file) {
      const std::string to_path = absl::StrCat(partial, "/", name);
      const std::string parent = to_path.substr(0, to_path.find_last_of('/'));
      if (dirs.insert(parent).second) {
        if (absl::Status s = to.CreateDirs(parent); !s.ok()) return s;
      }
      if (absl::Status s = CopyFile(*backend_, absl::StrCat(dir, "/", name), to, to_path, chunks);
          !s.ok()) {
        return s;
      }
    }
    for (const std::string& parent : dirs) {
      if (absl::Status s = to.SyncDir(parent); !s.ok()) return s;
    }
    // Tests kill ckptd here: the copy is on storage, not committed.
    FaultPoint("persist.copied");
    return absl::OkStatus();
  };
  absl::StatusOr<std::string> path = durable_.CommitCopy(*manifest, copy);
  if (!path.ok()) return WithContext(path.status(), who);
  return absl::OkStatus();
}

void MemoryTier::RunPersists() {
  while (true) {
    Queued next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](MemoryTier* t)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stop_ || !t->persists_.empty(); },
          this));
      if (stop_) {
        // The steps still queued go with the daemon, as their memory does.
        for (const Queued& q : persists_) {
          Log(absl::StrFormat("persist job=%s step=%d outcome=dropped reason=\"ckptd is stopping\"",
                              q.job, q.step));
        }
        return;
      }
      next = std::move(persists_.front());
      persists_.pop_front();
      persisting_ = true;
    }
    const absl::Time start = absl::Now();
    const absl::Status status = Persist(next.job, next.step);
    if (status.ok() && CorruptionPoint("memory.after_persist")) (void)FlipByte(next.job, next.step);
    next.pin.reset();
    // Committed on storage (the catalog counts it now) or not written.
    next.hold.reset();
    Log(absl::StrFormat("persist job=%s step=%d duration_s=%.3f outcome=%s%s", next.job, next.step,
                        absl::ToDoubleSeconds(absl::Now() - start), status.ok() ? "ok" : "failed",
                        status.ok() ? "" : absl::StrCat(" error=\"", status.message(), "\"")));
    absl::MutexLock lock(&mu_);
    persisting_ = false;
    ++(status.ok() ? persisted_ : persist_failed_);
  }
}

absl::Status MemoryTier::FlipByte(const std::string& job, int64_t step, const std::string& prefer) {
  absl::StatusOr<v1::CheckpointManifest> manifest = coordinator_->catalog().ReadManifest(job, step);
  if (!manifest.ok()) return manifest.status();
  const std::string dir = storage::StepDir(kRoot, job, step);
  // The first chunk of a file held here, of one named `prefer...` if any.
  std::string file;
  uint64_t offset = 0;
  bool preferred = false;
  (void)planning::ForEachChunk(*manifest, [&](const v1::StoredChunk& chunk, const std::string&) {
    const bool wanted = !prefer.empty() && absl::StartsWith(chunk.file(), prefer);
    if (chunk.length() == 0 || preferred || (!file.empty() && !wanted)) return absl::OkStatus();
    absl::StatusOr<bool> here = backend_->Exists(absl::StrCat(dir, "/", chunk.file()));
    if (!here.ok() || !*here) return absl::OkStatus();
    file = chunk.file();
    offset = chunk.file_offset() + StoredLength(chunk) / 2;
    preferred = wanted;
    return absl::OkStatus();
  });
  if (file.empty()) return absl::NotFoundError("the step has no bytes here to flip");
  const std::string path = absl::StrCat(dir, "/", file);
  absl::StatusOr<std::string> bytes = storage::ReadWholeFile(*backend_, path);
  if (!bytes.ok()) return bytes.status();
  if (offset >= bytes->size()) return absl::OutOfRangeError("the chunk is past the file's end");
  (*bytes)[offset] = static_cast<char>((*bytes)[offset] ^ 0x01);
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> out = backend_->NewWritableFile(path);
  if (!out.ok()) return out.status();
  if (absl::Status s = (*out)->WriteAt(0, bytes->data(), bytes->size()); !s.ok()) return s;
  if (absl::Status s = (*out)->Close(); !s.ok()) return s;
  // Said once done: a test that waits for it then finds the byte flipped.
  std::fprintf(stderr, "ckptd: flipped a byte of %s at offset %llu (job %s step %lld)\n",
               file.c_str(), static_cast<unsigned long long>(offset), job.c_str(),
               static_cast<long long>(step));
  return absl::OkStatus();
}

void MemoryTier::PersistSpreadWith(SpreadPersistence spread) {
  absl::MutexLock lock(&mu_);
  spread_ = std::move(spread);
}

PersistCounts MemoryTier::persist_counts() const {
  absl::MutexLock lock(&mu_);
  return PersistCounts{persisted_, persist_failed_, persists_.size() + (persisting_ ? 1u : 0u)};
}

void MemoryTier::WaitPersisted() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](MemoryTier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
        return t->stop_ || (t->persists_.empty() && !t->persisting_);
      },
      this));
}

std::vector<v1::MemoryTierJob> MemoryTier::Jobs() {
  std::vector<v1::MemoryTierJob> jobs;
  absl::StatusOr<std::vector<std::string>> names = backend_->ListDir(kRoot);
  if (!names.ok()) return jobs;
  for (const std::string& name : *names) {
    // Directory names and block counts only: status and every metrics
    // scrape ask, and a large job's MANIFEST is hundreds of MB to decode.
    absl::StatusOr<std::vector<int64_t>> steps = coordinator_->catalog().ListSteps(name);
    if (!steps.ok() || steps->empty()) continue;
    v1::MemoryTierJob& job = jobs.emplace_back();
    job.set_job(name);
    {
      absl::MutexLock lock(&copies_mu_);
      auto copies = copies_.find(name);
      job.set_copies(copies == copies_.end() ? 1 : copies->second.copies());
      if (copies != copies_.end()) job.set_erasure(copies->second.erasure());
    }
    for (int64_t step : *steps) {
      job.add_steps(step);
      job.set_bytes(job.bytes() + BytesUnder(storage::StepDir(kRoot, name, step)));
    }
  }
  return jobs;
}

std::vector<std::pair<int64_t, std::vector<std::string>>> MemoryTier::HeldSteps(
    const std::string& job) {
  std::vector<std::pair<int64_t, std::vector<std::string>>> held;
  absl::StatusOr<std::vector<int64_t>> steps = coordinator_->catalog().ListSteps(job);
  if (!steps.ok()) return held;
  absl::MutexLock lock(&set_aside_mu_);
  // Steps gone since take what was set aside of them along.
  for (auto it = set_aside_.lower_bound({job, std::numeric_limits<int64_t>::min()});
       it != set_aside_.end() && it->first.first == job;) {
    if (std::find(steps->begin(), steps->end(), it->first.second) != steps->end()) {
      ++it;
      continue;
    }
    set_aside_files_ -= it->second.size();
    it = set_aside_.erase(it);
  }
  for (int64_t step : *steps) {
    auto& [number, files] = held.emplace_back();
    number = step;
    auto aside = set_aside_.find({job, step});
    for (const char* sub : {"data", "parity"}) {
      absl::StatusOr<std::vector<std::string>> names =
          backend_->ListDir(absl::StrCat(storage::StepDir(kRoot, job, step), "/", sub));
      if (!names.ok()) continue;
      for (const std::string& name : *names) {
        std::string file = absl::StrCat(sub, "/", name);
        if (aside != set_aside_.end() && aside->second.contains(file)) continue;
        files.push_back(std::move(file));
      }
    }
  }
  return held;
}

bool MemoryTier::SetAside(const std::string& job, int64_t step, const std::string& file) {
  absl::MutexLock lock(&set_aside_mu_);
  auto it = set_aside_.find({job, step});
  if (it != set_aside_.end() && it->second.contains(file)) return true;
  if (set_aside_files_ >= kMaxSetAside) return false;
  set_aside_[{job, step}].insert(file);
  ++set_aside_files_;
  return true;
}

void MemoryTier::ForgetSetAside(const std::string& job, int64_t step) {
  absl::MutexLock lock(&set_aside_mu_);
  auto it = set_aside_.find({job, step});
  if (it == set_aside_.end()) return;
  set_aside_files_ -= it->second.size();
  set_aside_.erase(it);
}

absl::StatusOr<std::string> MemoryTier::CommitHere(const v1::CheckpointManifest& manifest,
                                                   const std::string& partial_dir,
                                                   const v1::MemoryTierJob& protection) {
  {
    absl::MutexLock lock(&copies_mu_);
    copies_[manifest.job()] = protection;
  }
  ForgetSetAside(manifest.job(), manifest.step());
  const FilesChanging changing(*this);
  const std::string from = absl::StrCat(kRoot, "/", partial_dir);
  // This host is the cluster's coordinator too: its commit already moved
  // the files, this host's with the rest, into the step.
  absl::StatusOr<bool> exists = coordinator_->catalog().StepExists(manifest.job(), manifest.step());
  absl::StatusOr<bool> partial_left = backend_->Exists(from);
  if (exists.ok() && *exists && partial_left.ok() && !*partial_left) {
    return storage::StepDir(kRoot, manifest.job(), manifest.step());
  }
  absl::StatusOr<std::string> path = coordinator_->CommitCopy(
      manifest,
      [&](const std::string& partial) -> absl::Status { return MoveFiles(from, partial); });
  (void)backend_->RemoveAll(from);
  return path;
}

absl::Status MemoryTier::MoveFiles(const std::string& from, const std::string& to) {
  // Moved, not copied: the files are the caller's.
  for (const char* sub : {"data", "parity"}) {
    absl::StatusOr<std::vector<std::string>> names =
        backend_->ListDir(absl::StrCat(from, "/", sub));
    if (absl::IsNotFound(names.status())) continue;
    if (!names.ok()) return names.status();
    if (absl::Status s = backend_->CreateDirs(absl::StrCat(to, "/", sub)); !s.ok()) return s;
    for (const std::string& name : *names) {
      absl::Status s = backend_->Rename(absl::StrCat(from, "/", sub, "/", name),
                                        absl::StrCat(to, "/", sub, "/", name));
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status MemoryTier::AdoptInto(const std::string& job, int64_t step, const std::string& dir,
                                   const std::string& step_dir) {
  absl::StatusOr<std::vector<std::string>> rebuilt = backend_->ListDir(dir + "/data");
  if (absl::IsNotFound(rebuilt.status())) return absl::OkStatus();
  if (!rebuilt.ok()) return rebuilt.status();
  if (absl::Status s = backend_->CreateDirs(step_dir + "/data"); !s.ok()) return s;
  absl::MutexLock lock(&set_aside_mu_);
  auto aside = set_aside_.find({job, step});
  for (const std::string& name : *rebuilt) {
    const std::string file = absl::StrCat("data/", name);
    const bool set_aside = aside != set_aside_.end() && aside->second.contains(file);
    // A share's stripe may cover part of a file this host still holds
    // good (beside one set aside): the rebuilt piece of it is dropped.
    absl::StatusOr<bool> held = backend_->Exists(absl::StrCat(step_dir, "/", file));
    if (!held.ok()) return held.status();
    if (*held && !set_aside) continue;
    absl::Status s =
        backend_->Rename(absl::StrCat(dir, "/", file), absl::StrCat(step_dir, "/", file));
    if (!s.ok()) return s;
    if (set_aside) {  // replaced whole (every share of it was rebuilt): good again
      aside->second.erase(file);
      --set_aside_files_;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryTier::NewScratchDir(const std::string& job, int64_t step) {
  const std::string dir =
      storage::PartialDir(kRoot, job, step, coordinator_->catalog().NewPartialId());
  if (absl::Status s = backend_->CreateDirs(dir + "/data"); !s.ok()) return s;
  return dir;
}

absl::Status MemoryTier::AdoptRebuilt(const v1::CheckpointManifest& manifest,
                                      const std::string& dir) {
  const std::string step_dir = storage::StepDir(kRoot, manifest.job(), manifest.step());
  absl::StatusOr<bool> exists = coordinator_->catalog().StepExists(manifest.job(), manifest.step());
  absl::Status status = exists.status();
  const FilesChanging changing(*this);
  if (status.ok() && *exists) {
    status = AdoptInto(manifest.job(), manifest.step(), dir, step_dir);
  } else if (status.ok()) {
    ForgetSetAside(manifest.job(), manifest.step());
    absl::StatusOr<std::string> path = coordinator_->CommitCopy(
        manifest, [&](const std::string& partial) { return MoveFiles(dir, partial); });
    status = path.status();
  }
  (void)backend_->RemoveAll(dir);
  return status;
}

}  // namespace ckpt::tier
