#include "tools/bench/disk_baseline.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"

namespace ckpt::bench {
namespace {

constexpr uint64_t kSingleBlock = 8 << 20;
constexpr uint64_t kUringBlock = 4 << 20;

using Buffer = std::unique_ptr<char, decltype(&std::free)>;

Buffer AlignedBuffer(uint64_t bytes) {
  Buffer b(static_cast<char*>(std::aligned_alloc(4096, bytes)), &std::free);
  std::memset(b.get(), 0x5a, bytes);  // fault it in before the clock starts
  return b;
}

absl::Status Errno(int err, const std::string& what) { return ErrnoStatus(err, what); }

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Opens with O_DIRECT when `direct` (clearing it when the filesystem
// refuses, as tmpfs does).
absl::StatusOr<int> Open(const std::string& path, bool write, bool* direct) {
  const int flags = write ? O_CREAT | O_TRUNC | O_WRONLY : O_RDONLY;
  int fd = *direct ? open(path.c_str(), flags | O_DIRECT, 0640) : -1;
  if (*direct && fd < 0 && errno == EINVAL) *direct = false;
  if (!*direct) fd = open(path.c_str(), flags, 0640);
  if (fd < 0) return Errno(errno, "open " + path);
  return fd;
}

// One thread, one blocking transfer after another.
absl::Status SingleStream(const std::string& path, uint64_t bytes, bool write, bool* direct) {
  absl::StatusOr<int> fd = Open(path, write, direct);
  if (!fd.ok()) return fd.status();
  Buffer block = AlignedBuffer(kSingleBlock);
  absl::Status status;
  for (uint64_t done = 0; done < bytes && status.ok(); done += kSingleBlock) {
    const ssize_t n =
        write ? ::write(*fd, block.get(), kSingleBlock) : ::read(*fd, block.get(), kSingleBlock);
    if (n != static_cast<ssize_t>(kSingleBlock)) {
      status = n < 0 ? Errno(errno, (write ? "write " : "read ") + path)
                     : absl::InternalError(absl::StrCat("short transfer on ", path));
    }
  }
  if (status.ok() && write && fsync(*fd) != 0) status = Errno(errno, "fsync " + path);
  close(*fd);
  return status;
}

// One file through one io_uring, queue_depth blocks in flight, as fio does.
absl::Status UringStream(const std::string& path, uint64_t bytes, bool write, bool direct,
                         unsigned queue_depth) {
  absl::StatusOr<int> fd = Open(path, write, &direct);
  if (!fd.ok()) return fd.status();
  io_uring ring;
  if (int rc = io_uring_queue_init(queue_depth, &ring, 0); rc < 0) {
    close(*fd);
    return Errno(-rc, "io_uring_queue_init");
  }
  Buffer blocks = AlignedBuffer(kUringBlock * queue_depth);
  std::vector<unsigned> free_slots;
  for (unsigned s = 0; s < queue_depth; ++s) free_slots.push_back(s);
  absl::Status status;
  uint64_t next = 0, completed = 0;
  while (completed < bytes && status.ok()) {
    while (next < bytes && !free_slots.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) break;
      const unsigned slot = free_slots.back();
      free_slots.pop_back();
      char* buffer = blocks.get() + uint64_t(slot) * kUringBlock;
      if (write) {
        io_uring_prep_write(sqe, *fd, buffer, kUringBlock, next);
      } else {
        io_uring_prep_read(sqe, *fd, buffer, kUringBlock, next);
      }
      io_uring_sqe_set_data64(sqe, slot);
      next += kUringBlock;
    }
    const int rc = io_uring_submit_and_wait(&ring, 1);
    if (rc < 0 && rc != -EINTR) {
      status = Errno(-rc, "io_uring_submit_and_wait");
      break;
    }
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      if (cqe->res != static_cast<int>(kUringBlock) && status.ok()) {
        status = cqe->res < 0 ? Errno(-cqe->res, (write ? "write " : "read ") + path)
                              : absl::InternalError(absl::StrCat("short transfer on ", path));
      }
      free_slots.push_back(static_cast<unsigned>(io_uring_cqe_get_data64(cqe)));
      completed += kUringBlock;
    }
    io_uring_cq_advance(&ring, seen);
  }
  // Drain what is still in flight before the buffers go away.
  while (free_slots.size() < queue_depth) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
    free_slots.push_back(static_cast<unsigned>(io_uring_cqe_get_data64(cqe)));
    io_uring_cqe_seen(&ring, cqe);
  }
  io_uring_queue_exit(&ring);
  if (status.ok() && write && fsync(*fd) != 0) status = Errno(errno, "fsync " + path);
  close(*fd);
  return status;
}

// `streams` files at once, each through its own thread and ring; returns
// the wall time of them all.
absl::StatusOr<double> Parallel(const std::vector<std::string>& paths, uint64_t bytes_each,
                                bool write, bool direct, unsigned queue_depth) {
  std::vector<absl::Status> results(paths.size());
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < paths.size(); ++i) {
    threads.emplace_back(
        [&, i] { results[i] = UringStream(paths[i], bytes_each, write, direct, queue_depth); });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = Since(start);
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return seconds;
}

}  // namespace

absl::StatusOr<DiskFigures> MeasureDisk(const std::string& dir, uint64_t bytes,
                                        const DiskOptions& options) {
  DiskFigures figures;
  const int streams = std::max(1, options.streams);
  const unsigned depth = std::max(1u, options.queue_depth);
  // Whole blocks of every way, and the parallel way's share too.
  const uint64_t unit = kSingleBlock * static_cast<uint64_t>(streams);
  bytes = std::max(unit, (bytes + unit - 1) / unit * unit);
  bool direct = true;
  auto record = [&](const std::string& way, bool write, double seconds) {
    const double gbps = bytes / seconds / 1e9;
    figures.ways[absl::StrCat("disk_", write ? "write_" : "read_", way, "_gbps")] = gbps;
    double& best = write ? figures.write_gbps : figures.read_gbps;
    best = std::max(best, gbps);
  };

  const std::string single = absl::StrCat(dir, "/ckpt-bench-disk-single.bin");
  for (bool write : {true, false}) {
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = SingleStream(single, bytes, write, &direct); !s.ok()) {
      unlink(single.c_str());
      return s;
    }
    record("single", write, Since(start));
  }
  unlink(single.c_str());

  const std::string one = absl::StrCat(dir, "/ckpt-bench-disk-uring.bin");
  for (bool write : {true, false}) {
    absl::StatusOr<double> seconds = Parallel({one}, bytes, write, direct, depth);
    if (!seconds.ok()) {
      unlink(one.c_str());
      return seconds.status();
    }
    record("uring", write, *seconds);
  }
  unlink(one.c_str());

  std::vector<std::string> paths;
  for (int i = 0; i < streams; ++i) {
    paths.push_back(absl::StrCat(dir, "/ckpt-bench-disk-parallel-", i, ".bin"));
  }
  absl::Status status;
  for (bool write : {true, false}) {
    absl::StatusOr<double> seconds = Parallel(paths, bytes / streams, write, direct, depth);
    if (!seconds.ok()) {
      status = seconds.status();
      break;
    }
    record("parallel", write, *seconds);
  }
  for (const std::string& p : paths) unlink(p.c_str());
  if (!status.ok()) return status;
  figures.direct = direct;
  return figures;
}

absl::StatusOr<DiskFigures> MeasureReads(const ReadSets& sets, const std::string& label,
                                         const DiskOptions& options) {
  DiskFigures figures;
  const unsigned depth = std::max(1u, options.queue_depth);
  bool direct = true;
  // Each way reads its own files, whole blocks of them: data read once is
  // served faster the second time, which would flatter the later ways.
  auto measure = [&](const std::string& way, const std::vector<std::string>& files,
                     bool parallel) -> absl::Status {
    std::vector<uint64_t> sizes;
    uint64_t total = 0;
    for (const std::string& f : files) {
      std::error_code ec;
      const uint64_t size = std::filesystem::file_size(f, ec);
      if (ec) return absl::NotFoundError(absl::StrCat("size of ", f, ": ", ec.message()));
      sizes.push_back(size / kSingleBlock * kSingleBlock);
      total += sizes.back();
    }
    if (total == 0) return absl::FailedPreconditionError("no whole blocks to read");
    std::vector<absl::Status> results(files.size());
    const auto start = std::chrono::steady_clock::now();
    if (parallel) {
      std::vector<std::thread> threads;
      for (size_t i = 0; i < files.size(); ++i) {
        threads.emplace_back([&, i] {
          results[i] = UringStream(files[i], sizes[i], /*write=*/false, direct, depth);
        });
      }
      for (std::thread& t : threads) t.join();
    } else {
      for (size_t i = 0; i < files.size(); ++i) {
        results[i] = way == "single"
                         ? SingleStream(files[i], sizes[i], /*write=*/false, &direct)
                         : UringStream(files[i], sizes[i], /*write=*/false, direct, depth);
        if (!results[i].ok()) break;
      }
    }
    const double seconds = Since(start);
    for (const absl::Status& s : results) {
      if (!s.ok()) return s;
    }
    const double gbps = total / seconds / 1e9;
    figures.ways[absl::StrCat("disk_read_", label, way, "_gbps")] = gbps;
    figures.read_gbps = std::max(figures.read_gbps, gbps);
    return absl::OkStatus();
  };
  const std::pair<const char*, const std::vector<std::string>*> ways[] = {
      {"single", &sets.single}, {"uring", &sets.uring}, {"parallel", &sets.parallel}};
  for (const auto& [way, files] : ways) {
    if (files->empty()) continue;
    if (absl::Status s = measure(way, *files, files == &sets.parallel); !s.ok()) return s;
  }
  figures.direct = direct;
  return figures;
}

}  // namespace ckpt::bench
