#include "daemon/storage/memory/memory_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "proto/lib/status_context.h"

namespace ckpt::storage {

namespace {

// Far beyond any test; keeps offset + length and a write's block bytes far
// from overflowing.
constexpr uint64_t kMaxFileSize = uint64_t{1} << 40;

std::string Normalize(const std::string& path) {
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (absl::string_view part : parts) absl::StrAppend(&out, "/", part);
  return out.empty() ? "/" : out;
}

std::string Parent(const std::string& normalized) {
  const size_t slash = normalized.find_last_of('/');
  return slash == 0 ? "/" : normalized.substr(0, slash);
}

// Every entry below dir starts with this.
std::string ChildPrefix(const std::string& dir) { return dir == "/" ? "/" : dir + "/"; }

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

MemoryBackendOptions Normalized(MemoryBackendOptions options) {
  if (options.block_bytes == 0) options.block_bytes = MemoryBackendOptions{}.block_bytes;
  // A write's block bytes then stay below 2 * kMaxFileSize: no overflow.
  options.block_bytes = std::min(options.block_bytes, kMaxFileSize);
  return options;
}

}  // namespace

// Bytes of blocks held by a backend and its inodes. Shared rather than owned
// by the backend, so an inode kept by a file object can always give its
// blocks back.
struct MemoryBackend::Budget {
  explicit Budget(uint64_t limit) : limit(limit) {}

  // Adds bytes to held unless that would pass the limit; on refusal sets
  // *held_now to what was held. A compare-exchange, so two writers cannot
  // both take the last room.
  bool TryReserve(uint64_t bytes, uint64_t* held_now) {
    uint64_t current = held.load();
    do {
      if (limit != 0 && (current > limit || bytes > limit - current)) {
        *held_now = current;
        return false;
      }
    } while (!held.compare_exchange_weak(current, current + bytes));
    return true;
  }
  void Release(uint64_t bytes) { held.fetch_sub(bytes); }

  const uint64_t limit;  // 0: none
  std::atomic<uint64_t> held{0};
};

// A file's bytes; shared by the name table and every open file object, so
// its memory goes back to the budget when the last of them lets go, as an
// unlinked file's space does on POSIX. The budget counts whole blocks, as
// written.
//
// A small file (below kMappedFrom: a MANIFEST, LATEST, a tiny step) lives in
// heap blocks. A large one, or one shared, lives in a memfd of its own
// mapped here: kernel shared memory, so a committed file can be handed to a
// rank to map read-only (Share) instead of being copied for it. Only those
// cost a descriptor and a mapping each (a store of 100,000 small files must
// not run out of either). The memfd is written through the mapping, in huge
// pages where a write covers them whole and the kernel allows it
// (shmem_enabled "advise"; daemon/pool/huge_pages.h): a rank then maps a GiB
// in a few hundred page table entries rather than 262144 (measured here:
// 1 ms against 88 ms per GiB), and reads and writes here run at memcpy
// speed (pread from a memfd measured 4.5 GB/s against memcpy's 10).
struct MemoryBackend::Inode {
  Inode(std::shared_ptr<Budget> budget, uint64_t block_bytes)
      : budget(std::move(budget)), block_bytes(block_bytes) {}
  ~Inode() { Truncate(); }

  // The budget and the memory are secured before a byte of the file
  // changes. 0 < length, offset + length <= kMaxFileSize.
  absl::Status Write(const std::string& path, uint64_t offset, const char* src, size_t length);
  // Returns the count, short only at the end of the file.
  size_t Read(uint64_t offset, char* dst, size_t length);
  uint64_t Size();
  // Empties the file and gives its blocks back, as O_TRUNC does: open
  // readers see it empty. A memfd goes with its memory; one handed out has
  // its pages punched out first, so whoever still maps it sees zeros.
  void Truncate();
  absl::StatusOr<std::shared_ptr<const SharedFile>> Share(const std::string& path);

  static constexpr uint64_t kHugePage = uint64_t{2} << 20;
  static constexpr uint64_t kMappedFrom = uint64_t{1} << 20;

  bool mapped() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return fd >= 0; }
  // Makes the mapping cover [0, end): the memfd created or grown (never
  // shrunk) and mapped again, geometrically, so a file written piece by
  // piece is mapped O(log) times. Heap blocks move into it.
  absl::Status MapLocked(const std::string& path, uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Heap blocks for every missing block of [first, last]: all or none.
  absl::Status AllocateHeapLocked(const std::string& path, uint64_t offset, uint64_t first,
                                  uint64_t last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const std::shared_ptr<Budget> budget;
  const uint64_t block_bytes;
  absl::Mutex mu;
  uint64_t size ABSL_GUARDED_BY(mu) = 0;
  // Indexed by offset / block_bytes: the blocks counted in the budget. A
  // block never written is a hole, read as zeros.
  std::vector<bool> present ABSL_GUARDED_BY(mu);
  uint64_t blocks_held ABSL_GUARDED_BY(mu) = 0;
  // Heap mode: a block per present entry (null for a hole).
  std::vector<std::unique_ptr<char[]>> blocks ABSL_GUARDED_BY(mu);
  // Mapped mode: the memfd and its mapping.
  int fd ABSL_GUARDED_BY(mu) = -1;
  char* map ABSL_GUARDED_BY(mu) = nullptr;
  uint64_t map_bytes ABSL_GUARDED_BY(mu) = 0;   // a multiple of kHugePage
  uint64_t file_bytes ABSL_GUARDED_BY(mu) = 0;  // the memfd's size, never less
  // [0, advised) of the mapping asked for huge pages: one growing range, so
  // a file is two mappings (advised, tail), not two per write.
  uint64_t advised ABSL_GUARDED_BY(mu) = 0;
  // Handed to another process: its pages are taken back when the file goes,
  // even from one that still maps it (Truncate). From then on the mapping
  // here is read-only between writes, and a write moves the file's change
  // time itself: a load skips bytes verified before it while that time
  // stands (daemon/tier/file_stamp.h), and a store through a writable
  // mapping whose pages are already writable moves nothing in the kernel.
  bool handed_out ABSL_GUARDED_BY(mu) = false;
};

absl::Status MemoryBackend::Inode::MapLocked(const std::string& path, uint64_t end) {
  if (end <= map_bytes) return absl::OkStatus();
  const uint64_t want = std::max((end + kHugePage - 1) / kHugePage * kHugePage,
                                 std::min(2 * map_bytes, kMaxFileSize));
  int new_fd = -1;
  if (fd < 0) {
    // Named for its path as first written (the kernel keeps 249 bytes; the
    // tail, which names the job, step and file): /proc/<pid>/fd shows an
    // operator, or a fault test, which file each memory file is.
    constexpr size_t kMaxMemfdName = 249;
    constexpr absl::string_view kPrefix = "ckpt-memory-tier:";
    const size_t room = kMaxMemfdName - kPrefix.size();
    const std::string name =
        absl::StrCat(kPrefix, path.size() > room ? path.substr(path.size() - room) : path);
    new_fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (new_fd < 0) {
      return ErrnoStatus(errno, absl::StrCat("write ", path, ": create its memory file"));
    }
    // A rank given the file cannot shrink it under the daemon (its next
    // touch past the end would be SIGBUS); the daemon never shrinks one
    // either (Truncate lets it go whole).
    (void)fcntl(new_fd, F_ADD_SEALS, F_SEAL_SHRINK);
  }
  const int target = fd >= 0 ? fd : new_fd;
  auto fail = [&](absl::Status s) {
    if (new_fd >= 0) close(new_fd);
    return s;
  };
  // Growing the file allocates nothing: pages come as they are written. A
  // mapping that failed before may have left it larger: it never shrinks.
  const uint64_t grown = std::max(want, fd >= 0 ? file_bytes : 0);
  if (grown > (fd >= 0 ? file_bytes : 0) && ftruncate(target, static_cast<off_t>(grown)) != 0) {
    return fail(ErrnoStatus(errno, absl::StrCat("write ", path, ": grow its memory file")));
  }
  void* at = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, target, 0);
  if (at == MAP_FAILED) {
    const int error = errno;
    return fail(ErrnoStatus(
        error, absl::StrFormat("write %s: cannot map %d bytes of its memory file", path, want)));
  }
  char* const fresh = static_cast<char*>(at);
  // What is written already may sit in huge pages: map it so; heap blocks
  // come in whole ones.
  const uint64_t whole = size / kHugePage * kHugePage;
  if (whole > 0) (void)madvise(fresh, whole, MADV_HUGEPAGE);
  advised = whole;
  for (uint64_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i] == nullptr) continue;
    const uint64_t from = i * block_bytes;
    std::memcpy(fresh + from, blocks[i].get(), std::min(block_bytes, size - from));
  }
  blocks.clear();
  if (map != nullptr) munmap(map, map_bytes);
  if (new_fd >= 0) fd = new_fd;
  map = fresh;
  map_bytes = want;
  file_bytes = grown;
  return absl::OkStatus();
}

absl::Status MemoryBackend::Inode::AllocateHeapLocked(const std::string& path, uint64_t offset,
                                                      uint64_t first, uint64_t last) {
  std::vector<std::unique_ptr<char[]>> fresh;
  for (uint64_t i = first; i <= last; ++i) {
    if (i < blocks.size() && blocks[i] != nullptr) continue;
    // Uninitialized: the write copies over what it covers; Write zeroes
    // the rest.
    fresh.emplace_back(new (std::nothrow) char[block_bytes]);
    if (fresh.back() == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("write %s at offset %d: out of host memory for a %d-byte block", path,
                          offset, block_bytes));
    }
  }
  if (blocks.size() <= last) blocks.resize(last + 1);
  auto next = fresh.begin();
  for (uint64_t i = first; i <= last; ++i) {
    if (blocks[i] != nullptr) continue;
    blocks[i] = std::move(*next++);
    std::memset(blocks[i].get(), 0, block_bytes);
  }
  return absl::OkStatus();
}

absl::Status MemoryBackend::Inode::Write(const std::string& path, uint64_t offset, const char* src,
                                         size_t length) {
  const uint64_t end = offset + length;
  const uint64_t first = offset / block_bytes;
  const uint64_t last = (end - 1) / block_bytes;
  absl::MutexLock lock(&mu);
  uint64_t missing = 0;
  for (uint64_t i = first; i <= last; ++i) {
    if (i >= present.size() || !present[i]) ++missing;
  }
  const uint64_t missing_bytes = missing * block_bytes;
  uint64_t held_now = 0;
  if (missing > 0 && !budget->TryReserve(missing_bytes, &held_now)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "write %s at offset %d: %d bytes need %d bytes of new blocks, and %d of the %d-byte "
        "memory tier budget are held",
        path, offset, length, missing_bytes, held_now, budget->limit));
  }
  absl::Status room = mapped() || end > kMappedFrom ? MapLocked(path, end)
                                                    : AllocateHeapLocked(path, offset, first, last);
  if (!room.ok()) {
    budget->Release(missing_bytes);
    return room;
  }
  if (present.size() <= last) present.resize(last + 1);
  for (uint64_t i = first; i <= last; ++i) present[i] = true;
  blocks_held += missing;
  size = std::max(size, end);
  if (!mapped()) {
    for (uint64_t i = first; i <= last; ++i) {
      const uint64_t block_start = i * block_bytes;
      const uint64_t from = std::max(offset, block_start) - block_start;
      const uint64_t to = std::min(end, block_start + block_bytes) - block_start;
      std::memcpy(blocks[i].get() + from, src + (block_start + from - offset), to - from);
    }
    return absl::OkStatus();
  }
  // Huge pages up to the last whole one this write reaches: a file's ragged
  // end must not take 2 MiB, and the advised range grows as one mapping.
  const uint64_t huge_to = end / kHugePage * kHugePage;
  if (huge_to > advised) {
    (void)madvise(map + advised, huge_to - advised, MADV_HUGEPAGE);
    advised = huge_to;
  }
  // The kernel allocates the pages as they are touched here; out of memory
  // is the OOM killer's, as for any allocation.
  if (handed_out) (void)mprotect(map, map_bytes, PROT_READ | PROT_WRITE);
  std::memcpy(map + offset, src, length);
  if (handed_out) {
    (void)mprotect(map, map_bytes, PROT_READ);
    (void)futimens(fd, nullptr);
  }
  return absl::OkStatus();
}

size_t MemoryBackend::Inode::Read(uint64_t offset, char* dst, size_t length) {
  absl::ReaderMutexLock lock(&mu);
  if (offset >= size) return 0;
  const size_t n = std::min<uint64_t>(length, size - offset);
  // Block by block: a hole is zeros written here, not read from a memfd
  // (reading a hole of shared memory allocates its page).
  for (size_t done = 0; done < n;) {
    const uint64_t pos = offset + done;
    const uint64_t index = pos / block_bytes;
    const uint64_t within = pos % block_bytes;
    size_t piece = std::min<uint64_t>(n - done, block_bytes - within);
    const bool held = index < present.size() && present[index];
    if (!held) {
      std::memset(dst + done, 0, piece);
    } else if (mapped()) {
      // The run of held blocks from here, in one copy.
      uint64_t next = index + 1;
      while (done + piece < n && next < present.size() && present[next]) {
        piece = std::min<uint64_t>(n - done, piece + block_bytes);
        ++next;
      }
      std::memcpy(dst + done, map + pos, piece);
    } else {
      std::memcpy(dst + done, blocks[index].get() + within, piece);
    }
    done += piece;
  }
  return n;
}

uint64_t MemoryBackend::Inode::Size() {
  absl::ReaderMutexLock lock(&mu);
  return size;
}

void MemoryBackend::Inode::Truncate() {
  std::vector<std::unique_ptr<char[]>> old_blocks;
  int old_fd = -1;
  char* old_map = nullptr;
  uint64_t old_map_bytes = 0;
  uint64_t old_file_bytes = 0;
  bool old_shared = false;
  uint64_t old_count = 0;
  {
    absl::MutexLock lock(&mu);
    old_blocks.swap(blocks);
    old_fd = std::exchange(fd, -1);
    old_map = std::exchange(map, nullptr);
    old_map_bytes = std::exchange(map_bytes, 0);
    old_file_bytes = std::exchange(file_bytes, 0);
    old_shared = std::exchange(handed_out, false);
    advised = 0;
    present.clear();
    old_count = std::exchange(blocks_held, 0);
    size = 0;
  }
  // Freed outside the lock (GiBs take a while), and before the budget hears
  // of it, so bytes_held never reads less than what is allocated. A file
  // once shared has its pages punched out first: a process that still maps
  // it (a rank keeping a load's descriptor) sees zeros and pins nothing the
  // budget no longer counts.
  old_blocks.clear();
  if (old_shared && old_fd >= 0) {
    (void)fallocate(old_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                    static_cast<off_t>(old_file_bytes));
  }
  if (old_map != nullptr) munmap(old_map, old_map_bytes);
  if (old_fd >= 0) close(old_fd);
  budget->Release(old_count * block_bytes);
}

MemoryBackend::SharedFile::~SharedFile() {
  if (data != nullptr) munmap(const_cast<char*>(data), size);
  if (fd >= 0) close(fd);
}

absl::StatusOr<std::shared_ptr<const MemoryBackend::SharedFile>> MemoryBackend::Inode::Share(
    const std::string& path) {
  absl::MutexLock lock(&mu);
  auto shared = std::make_shared<SharedFile>();
  shared->size = size;
  if (size == 0) return shared;
  // A small file moves into a memfd of its own once, to be shared.
  if (!mapped()) {
    if (absl::Status s = MapLocked(path, size); !s.ok()) return s;
  }
  // Owner-read only: a rank of another user given the descriptor below
  // cannot reopen it for writing through /proc either (a memfd starts 0777).
  if (!handed_out && fchmod(fd, 0400) != 0) {
    return ErrnoStatus(errno, absl::StrCat("share ", path, ": make it read-only"));
  }
  // Nothing here writes a shared file but Write, which lifts this for its
  // copy: a stray store faults instead of changing verified bytes unseen,
  // and ptrace (/proc/<pid>/mem) cannot write a read-only shared mapping.
  if (!handed_out && mprotect(map, map_bytes, PROT_READ) != 0) {
    return ErrnoStatus(errno, absl::StrCat("share ", path, ": map it read-only here"));
  }
  handed_out = true;
  // Reopened read-only: a rank given this descriptor can map the bytes but
  // neither write them nor map them writable.
  shared->fd = open(absl::StrCat("/proc/self/fd/", fd).c_str(), O_RDONLY | O_CLOEXEC);
  if (shared->fd < 0) return ErrnoStatus(errno, absl::StrCat("share ", path, ": reopen read-only"));
  // Not populated: the caller may hold locks, and the pages are mapped as
  // they are read (one fault per 2 MiB where they are huge).
  void* at = mmap(nullptr, size, PROT_READ, MAP_SHARED, shared->fd, 0);
  if (at == MAP_FAILED) return ErrnoStatus(errno, absl::StrCat("share ", path, ": map"));
  shared->data = static_cast<const char*>(at);
  return std::shared_ptr<const SharedFile>(std::move(shared));
}

namespace {

class MemoryWritableFile : public WritableFile {
 public:
  MemoryWritableFile(std::string path, std::shared_ptr<MemoryBackend::Inode> inode)
      : path_(std::move(path)), inode_(std::move(inode)) {}

  absl::Status WriteAt(uint64_t offset, const void* data, size_t length) override {
    if (inode_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("write ", path_, ": file is closed"));
    }
    if (offset > kMaxFileSize || length > kMaxFileSize - offset) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "write %s at offset %d: %d bytes would pass the memory backend's file size limit", path_,
          offset, length));
    }
    if (length == 0) return absl::OkStatus();
    return inode_->Write(path_, offset, static_cast<const char*>(data), length);
  }

  absl::Status Sync() override {
    if (inode_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("sync ", path_, ": file is closed"));
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    inode_.reset();
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  std::shared_ptr<MemoryBackend::Inode> inode_;  // null once closed
};

class MemoryReadableFile : public ReadableFile {
 public:
  MemoryReadableFile(std::string path, std::shared_ptr<MemoryBackend::Inode> inode)
      : path_(std::move(path)), inode_(std::move(inode)) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset, void* dst, size_t length) override {
    return inode_->Read(offset, static_cast<char*>(dst), length);
  }

  // Overridden only so the error names the file.
  absl::Status ReadBatch(absl::Span<const IoOp> ops) override {
    for (const IoOp& op : ops) {
      absl::StatusOr<size_t> n = ReadAt(op.offset, op.buffer, op.length);
      if (!n.ok()) return n.status();
      if (*n != op.length) {
        return absl::DataLossError(
            absl::StrFormat("short read %s at offset %d: wanted %d bytes, the file ends after %d",
                            path_, op.offset, op.length, *n));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override { return inode_->Size(); }

 private:
  const std::string path_;
  const std::shared_ptr<MemoryBackend::Inode> inode_;
};

}  // namespace

MemoryBackend::MemoryBackend(MemoryBackendOptions options)
    : options_(Normalized(options)), budget_(std::make_shared<Budget>(options_.budget_bytes)) {
  dirs_.insert("/");
}
MemoryBackend::~MemoryBackend() = default;

uint64_t MemoryBackend::bytes_held() const { return budget_->held.load(); }

bool MemoryBackend::IsDirLocked(const std::string& p) const { return dirs_.count(p) > 0; }
bool MemoryBackend::IsFileLocked(const std::string& p) const { return files_.count(p) > 0; }

bool MemoryBackend::HasChildrenLocked(const std::string& dir) const {
  const std::string prefix = ChildPrefix(dir);
  auto f = files_.lower_bound(prefix);
  if (f != files_.end() && StartsWith(f->first, prefix)) return true;
  auto d = dirs_.upper_bound(dir);
  return d != dirs_.end() && StartsWith(*d, prefix);
}

void MemoryBackend::RemoveTreeLocked(const std::string& p,
                                     std::vector<std::shared_ptr<Inode>>* unlinked) {
  if (auto it = files_.find(p); it != files_.end()) {
    unlinked->push_back(std::move(it->second));
    files_.erase(it);
  }
  const std::string prefix = ChildPrefix(p);
  for (auto it = files_.lower_bound(prefix); it != files_.end() && StartsWith(it->first, prefix);) {
    unlinked->push_back(std::move(it->second));
    it = files_.erase(it);
  }
  // "/" is its own prefix, and stays: it always exists.
  for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && StartsWith(*it, prefix);)
    it = *it == "/" ? std::next(it) : dirs_.erase(it);
  if (p != "/") dirs_.erase(p);
}

absl::StatusOr<std::unique_ptr<WritableFile>> MemoryBackend::NewWritableFile(
    const std::string& path) {
  const std::string p = Normalize(path);
  std::shared_ptr<Inode> inode;
  {
    absl::MutexLock lock(&mu_);
    if (IsDirLocked(p)) return ErrnoStatus(EISDIR, absl::StrCat("open ", path));
    const std::string parent = Parent(p);
    if (!IsDirLocked(parent)) {
      return ErrnoStatus(IsFileLocked(parent) ? ENOTDIR : ENOENT, absl::StrCat("open ", path));
    }
    std::shared_ptr<Inode>& slot = files_[p];
    if (slot == nullptr) slot = std::make_shared<Inode>(budget_, options_.block_bytes);
    inode = slot;
  }
  // Truncate the existing inode, as O_TRUNC does: open readers see it empty.
  inode->Truncate();
  return std::make_unique<MemoryWritableFile>(path, std::move(inode));
}

absl::StatusOr<std::unique_ptr<ReadableFile>> MemoryBackend::NewReadableFile(
    const std::string& path) {
  const std::string p = Normalize(path);
  absl::MutexLock lock(&mu_);
  if (IsDirLocked(p)) return ErrnoStatus(EISDIR, absl::StrCat("open ", path));
  auto it = files_.find(p);
  if (it == files_.end()) return ErrnoStatus(ENOENT, absl::StrCat("open ", path));
  return std::make_unique<MemoryReadableFile>(path, it->second);
}

absl::StatusOr<std::shared_ptr<const MemoryBackend::SharedFile>> MemoryBackend::Share(
    const std::string& path) {
  const std::string p = Normalize(path);
  std::shared_ptr<Inode> inode;
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = files_.find(p);
    if (it == files_.end()) {
      return ErrnoStatus(IsDirLocked(p) ? EISDIR : ENOENT, absl::StrCat("share ", path));
    }
    inode = it->second;
  }
  return inode->Share(path);
}

absl::Status MemoryBackend::CreateDirs(const std::string& path) {
  const std::string p = Normalize(path);
  absl::MutexLock lock(&mu_);
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(p, '/', absl::SkipEmpty())) {
    absl::StrAppend(&prefix, "/", part);
    if (IsFileLocked(prefix)) {
      return ErrnoStatus(prefix == p ? EEXIST : ENOTDIR, absl::StrCat("mkdir ", prefix));
    }
    dirs_.insert(prefix);
  }
  return absl::OkStatus();
}

absl::Status MemoryBackend::SyncDir(const std::string& path) {
  const std::string p = Normalize(path);
  absl::ReaderMutexLock lock(&mu_);
  if (IsDirLocked(p)) return absl::OkStatus();
  return ErrnoStatus(IsFileLocked(p) ? ENOTDIR : ENOENT, absl::StrCat("open directory ", path));
}

absl::Status MemoryBackend::RenameNoReplace(const std::string& from, const std::string& to) {
  absl::MutexLock serial(&no_replace_mu_);
  {
    absl::ReaderMutexLock lock(&mu_);
    const std::string t = Normalize(to);
    if (IsFileLocked(t) || IsDirLocked(t)) {
      return ErrnoStatus(EEXIST, absl::StrCat("rename ", from, " to ", to));
    }
  }
  return Rename(from, to);
}

absl::Status MemoryBackend::Rename(const std::string& from, const std::string& to) {
  const std::string f = Normalize(from);
  const std::string t = Normalize(to);
  const std::string context = absl::StrCat("rename ", from, " to ", to);
  // Declared before the lock, so a replaced file's blocks are freed after it.
  std::shared_ptr<Inode> replaced;
  absl::MutexLock lock(&mu_);
  const bool from_is_file = IsFileLocked(f);
  if (!from_is_file && !IsDirLocked(f)) return ErrnoStatus(ENOENT, context);
  if (f == t) return absl::OkStatus();
  if (f == "/" || StartsWith(t, ChildPrefix(f))) return ErrnoStatus(EINVAL, context);
  if (!IsDirLocked(Parent(t))) return ErrnoStatus(ENOENT, context);

  if (from_is_file) {
    if (IsDirLocked(t)) return ErrnoStatus(EISDIR, context);
    std::shared_ptr<Inode>& slot = files_[t];
    replaced = std::move(slot);
    slot = std::move(files_[f]);
    files_.erase(f);
    return absl::OkStatus();
  }
  if (IsFileLocked(t)) return ErrnoStatus(ENOTDIR, context);
  if (IsDirLocked(t)) {
    if (HasChildrenLocked(t)) return ErrnoStatus(ENOTEMPTY, context);
    dirs_.erase(t);
  }
  // Move the subtree: collect first, the maps cannot be re-keyed in place.
  const std::string prefix = ChildPrefix(f);
  std::vector<std::pair<std::string, std::shared_ptr<Inode>>> moved_files;
  for (auto it = files_.lower_bound(prefix); it != files_.end() && StartsWith(it->first, prefix);) {
    moved_files.emplace_back(t + it->first.substr(f.size()), std::move(it->second));
    it = files_.erase(it);
  }
  std::vector<std::string> moved_dirs;
  for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && StartsWith(*it, prefix);) {
    moved_dirs.push_back(t + it->substr(f.size()));
    it = dirs_.erase(it);
  }
  dirs_.erase(f);
  dirs_.insert(t);
  for (auto& d : moved_dirs) dirs_.insert(std::move(d));
  for (auto& [name, inode] : moved_files) files_[name] = std::move(inode);
  return absl::OkStatus();
}

absl::Status MemoryBackend::RemoveAll(const std::string& path) {
  const std::string p = Normalize(path);
  // Declared before the lock, so the removed files' blocks are freed after it.
  std::vector<std::shared_ptr<Inode>> unlinked;
  absl::MutexLock lock(&mu_);
  RemoveTreeLocked(p, &unlinked);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> MemoryBackend::ListDir(const std::string& path) {
  const std::string p = Normalize(path);
  absl::ReaderMutexLock lock(&mu_);
  if (!IsDirLocked(p)) {
    return ErrnoStatus(IsFileLocked(p) ? ENOTDIR : ENOENT, absl::StrCat("list directory ", path));
  }
  const std::string prefix = ChildPrefix(p);
  std::vector<std::string> names;
  auto direct_child = [&](const std::string& key) {
    const std::string rest = key.substr(prefix.size());
    if (rest.find('/') == std::string::npos) names.push_back(rest);
  };
  for (auto it = files_.lower_bound(prefix); it != files_.end() && StartsWith(it->first, prefix);
       ++it)
    direct_child(it->first);
  for (auto it = dirs_.lower_bound(prefix); it != dirs_.end() && StartsWith(*it, prefix); ++it) {
    if (*it != p) direct_child(*it);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<bool> MemoryBackend::Exists(const std::string& path) {
  const std::string p = Normalize(path);
  absl::ReaderMutexLock lock(&mu_);
  return IsFileLocked(p) || IsDirLocked(p);
}

}  // namespace ckpt::storage
