// The object-store backend: a Backend over an S3 bucket (AWS S3, Ceph RGW,
// Swift's s3api, MinIO). Paths are "s3://<bucket>/<key>"; directories are
// key prefixes, so CreateDirs and SyncDir have nothing to do and an empty
// directory does not exist.
//
// Writing: a file is one object. Its bytes are cut into parts on a fixed
// schedule (part_bytes for the first group of parts, then groups of doubling
// size, so that no file needs more parts than the server allows): a part is
// uploaded, in parallel with the others on the backend's transfer threads,
// as soon as writes have covered it; a write that covers whole parts goes
// out straight from the caller's memory (the pinned pool), others are copied.
// Sync uploads what is left (never-written ranges as zeros) and completes the
// multipart upload; a file that fits one part is one PUT. The object appears
// whole at Sync or not at all; a file dropped without Sync or Close aborts
// its upload. A part cannot be written again once uploaded
// (FAILED_PRECONDITION): ckpt's writers write every byte once.
//
// Reading: HEAD for the size at open, then ranged GETs, a batch's ranges in
// parallel.
//
// No rename: Rename of one object is a server-side copy and a delete (not
// atomic); of a directory, UNIMPLEMENTED. The commit protocol for object
// stores (coordinator/commit.h) needs neither: it writes a commit object.
// Locks are this process's (the default): S3 has no cross-process locks.
//
// At creation the backend probes the server: that the bucket answers, how
// many parts an upload may have, and whether conditional creates
// (If-None-Match: *) are honoured.
#ifndef CKPT_DAEMON_STORAGE_S3_S3_BACKEND_H_
#define CKPT_DAEMON_STORAGE_S3_S3_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/storage/backend.h"
#include "daemon/storage/s3/s3_client.h"
#include "daemon/storage/s3/s3_leases.h"
#include "daemon/storage/task_threads.h"

namespace ckpt::storage::s3 {

struct S3BackendOptions {
  S3ClientOptions client;
  std::string bucket;
  // Size of the first parts of an upload (at least S3's 5 MiB minimum).
  size_t part_bytes = size_t{16} << 20;
  // Parts and ranged GETs in flight over the whole backend.
  int transfer_threads = 16;
  // Bytes of copied parts waiting for upload per file before a write waits.
  size_t max_buffered_bytes_per_file = size_t{256} << 20;
  // Reads of one batch are joined into ranged GETs of up to this many
  // bytes (fewer requests), and longer reads split (parallel GETs).
  size_t read_range_bytes = size_t{16} << 20;
  // Two reads at most this far apart join, the bytes between read and
  // dropped: cheaper than a request of their own.
  size_t read_gap_bytes = size_t{256} << 10;
  // 0: probe the server. Tests set it to skip or to force a value.
  int max_parts = 0;
  // LockFile's leases (s3_leases.h).
  LeaseOptions leases;
};

// What the probe found (also for the log).
struct S3ServerLimits {
  int max_parts = 0;
  bool conditional_create = false;
};

class S3Backend;

// Probes the server and returns the backend; an error names the endpoint,
// the bucket and what failed.
absl::StatusOr<std::unique_ptr<S3Backend>> NewS3Backend(S3BackendOptions options);

class S3Backend : public Backend {
 public:
  ~S3Backend() override;
  std::string Name() const override;
  bool IsObjectStore() const override { return true; }
  std::optional<RequestCounts> Requests() const override;

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::Status RenameNoReplace(const std::string& from, const std::string& to) override;
  // With conditional creates (probed), the server picks the one winner.
  // Without (Swift), this checks, writes and reads back: exact only when one
  // writer creates each file, which the commit protocol ensures (the
  // coordinator alone commits a job's steps, one at a time).
  absl::Status CreateFileExclusive(const std::string& path, const std::string& contents) override;
  absl::StatusOr<std::vector<std::string>> ListUnfinishedFiles(const std::string& dir) override;
  // Also aborts the multipart uploads under path.
  absl::Status RemoveAll(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override;
  absl::StatusOr<bool> Exists(const std::string& path) override;
  absl::StatusOr<absl::Time> ModifiedTime(const std::string& path) override;
  // Every file's ranged GETs at once on the transfer threads.
  absl::Status ReadFiles(absl::Span<const FileReads> reads, size_t* failed) override;
  // This process's lock, then a lease object (s3_leases.h), so that other
  // processes and hosts see it too.
  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path, LockMode mode,
                                                     bool wait) override;

  // The key of a path of this backend's bucket; INVALID_ARGUMENT otherwise.
  absl::StatusOr<std::string> KeyOf(const std::string& path) const;
  // "s3://<bucket>/<key>".
  std::string PathOf(const std::string& key) const;

  S3Client& client() { return *client_; }
  const S3BackendOptions& options() const { return options_; }
  const S3ServerLimits& limits() const { return limits_; }

 private:
  friend absl::StatusOr<std::unique_ptr<S3Backend>> NewS3Backend(S3BackendOptions options);
  explicit S3Backend(S3BackendOptions options);
  absl::Status Probe();

  const S3BackendOptions options_;
  std::unique_ptr<S3Client> client_;
  std::unique_ptr<TaskThreads> transfers_;  // parts and ranged GETs in flight
  std::unique_ptr<S3Leases> leases_;
  S3ServerLimits limits_;
};

// Splits "s3://bucket/prefix" into bucket and prefix (no trailing '/');
// INVALID_ARGUMENT naming the URL for anything else.
absl::StatusOr<std::pair<std::string, std::string>> ParseS3Url(const std::string& url);
inline bool IsS3Url(absl::string_view path) { return path.substr(0, 5) == "s3://"; }

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_S3_BACKEND_H_
