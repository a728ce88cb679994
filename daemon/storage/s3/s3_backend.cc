#include "daemon/storage/s3/s3_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "daemon/storage/s3/ranged_gets.h"

namespace ckpt::storage::s3 {
namespace {

constexpr uint64_t kMinPartBytes = uint64_t{5} << 20;  // S3's minimum for all but the last
constexpr uint64_t kMaxPartBytes = uint64_t{5} << 30;  // and its maximum for any part
constexpr int kPartGroups = 16;                        // max_parts is split into this many

// Reads as kMaxPartBytes of zeros without holding memory (the zero page):
// the never-written ranges of a file are uploaded from here.
const char* Zeros() {
  static const char* zeros = [] {
    void* p =
        mmap(nullptr, kMaxPartBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<const char*>(p);
  }();
  return zeros;
}

// Which bytes of a file each part holds: groups of max_parts / 16 parts,
// each group's parts twice the size of the last group's (up to S3's 5 GiB).
// First parts of 16 MiB and Swift's 1,000 parts cover 16 MiB x 62 x 1023
// (about 1 TiB); AWS's 10,000 parts cover more.
class PartSchedule {
 public:
  PartSchedule(uint64_t first_bytes, int max_parts)
      : first_(std::clamp(first_bytes, kMinPartBytes, kMaxPartBytes)),
        per_group_(std::max(1, max_parts / kPartGroups)),
        max_parts_(max_parts) {}

  struct Range {
    int index = 0;  // 0-based; the part number is index + 1
    uint64_t start = 0;
    uint64_t length = 0;
  };
  // The part holding offset; nullopt beyond what max_parts can hold.
  std::optional<Range> At(uint64_t offset) const {
    uint64_t start = 0;
    for (int group = 0;; ++group) {
      const uint64_t size = GroupPartBytes(group);
      const uint64_t group_bytes = size * per_group_;
      const int first_index = group * per_group_;
      if (first_index >= max_parts_) return std::nullopt;
      if (offset < start + group_bytes) {
        const int index = first_index + static_cast<int>((offset - start) / size);
        if (index >= max_parts_) return std::nullopt;
        return Range{index, start + (offset - start) / size * size, size};
      }
      start += group_bytes;
    }
  }

 private:
  uint64_t GroupPartBytes(int group) const {
    return group >= 10 ? kMaxPartBytes : std::min(first_ << group, kMaxPartBytes);
  }
  const uint64_t first_;
  const int per_group_;
  const int max_parts_;
};

// Work done, or the first error of it.
class Completion {
 public:
  void Add(int n = 1) {
    absl::MutexLock lock(&mu_);
    pending_ += n;
  }
  void Done(absl::Status s) {
    absl::MutexLock lock(&mu_);
    if (!s.ok() && error_.ok()) error_ = std::move(s);
    --pending_;
  }
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* pending) { return *pending == 0; }, &pending_));
    return error_;
  }
  absl::Status error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }
  // Runs work on `threads`, counted here. Threads that are stopping (the
  // backend going away, after its files) refuse it: it fails, never hangs.
  void Run(TaskThreads& threads, std::function<absl::Status()> work) {
    Add();
    if (!threads.Submit([this, work = std::move(work)] { Done(work()); })) {
      Done(absl::CancelledError("s3: the backend is stopping"));
    }
  }

 private:
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

std::string NormalizeKey(absl::string_view key) {
  std::string out;
  for (absl::string_view part : absl::StrSplit(key, '/', absl::SkipEmpty())) {
    if (!out.empty()) out.push_back('/');
    absl::StrAppend(&out, part);
  }
  return out;
}

}  // namespace

namespace {

class S3WritableFile : public WritableFile {
 public:
  S3WritableFile(S3Backend& backend, TaskThreads& transfers, std::string path, std::string key)
      : backend_(backend),
        transfers_(transfers),
        path_(std::move(path)),
        key_(std::move(key)),
        schedule_(backend.options().part_bytes, backend.limits().max_parts) {}

  ~S3WritableFile() override { Abandon(); }

  // Dropped unfinished: nothing of it may appear, nor linger as parts.
  void Abandon() override {
    (void)buffered_.Wait();
    closed_ = true;
    ReleaseBuffers();
    if (synced_ || upload_id_.empty()) return;
    const absl::Status s =
        backend_.client().AbortMultipartUpload(backend_.options().bucket, key_, upload_id_);
    if (!s.ok()) {
      // Not lost: a restart or gc finds and aborts it (Catalog).
      std::fprintf(stderr, "ckptd: %s: abandoning upload %s: %s\n", path_.c_str(),
                   upload_id_.c_str(), std::string(s.message()).c_str());
    }
    upload_id_.clear();
  }

  absl::Status WriteAt(uint64_t offset, const void* data, size_t length) override {
    const IoOp op{offset, const_cast<void*>(data), length};
    return WriteBatch({&op, 1});
  }

  absl::Status WriteBatch(absl::Span<const IoOp> ops) override {
    if (synced_ || closed_) {
      return absl::FailedPreconditionError(
          absl::StrCat("write ", path_,
                       ": the object is already complete (written once, at "
                       "Sync or Close)"));
    }
    if (absl::Status s = buffered_.error(); !s.ok()) return Named(s);
    for (const IoOp& op : ops) {
      if (op.length > UINT64_MAX - op.offset) {
        return absl::OutOfRangeError(absl::StrCat("write ", path_, ": ", op.length,
                                                  " bytes at offset ", op.offset, " overflow"));
      }
    }
    // Uploads from the caller's memory: done before returning, whatever
    // the return.
    Completion direct;
    struct WaitAtExit {
      Completion& c;
      ~WaitAtExit() { (void)c.Wait(); }
    } wait_at_exit{direct};
    for (const IoOp& op : ops) {
      const char* src = static_cast<const char*>(op.buffer);
      uint64_t at = op.offset;
      const uint64_t end = op.offset + op.length;
      while (at < end) {
        std::optional<PartSchedule::Range> part = schedule_.At(at);
        if (!part.has_value()) {
          return absl::OutOfRangeError(absl::StrCat("write ", path_, ": offset ", at,
                                                    " is beyond what ", backend_.limits().max_parts,
                                                    " parts of an upload can hold"));
        }
        const uint64_t part_end = part->start + part->length;
        const uint64_t n = std::min(end, part_end) - at;
        Part& p = parts_[part->index];
        if (p.submitted) {
          return absl::FailedPreconditionError(absl::StrFormat(
              "write %s: bytes %d..%d fall in part %d, already uploaded (an object store takes "
              "each part once)",
              path_, at, at + n, part->index + 1));
        }
        if (at == part->start && n == part->length && p.buffer == nullptr) {
          // The whole part from the caller's memory: no copy.
          if (absl::Status s = Submit(part->index, src + (at - op.offset), n, direct); !s.ok()) {
            return s;
          }
        } else {
          if (p.buffer == nullptr) {
            if (absl::Status s = ReserveBuffer(part->length, part->index); !s.ok()) {
              return s;
            }
            p.buffer.reset(new char[part->length]());
            p.length = part->length;
          }
          std::memcpy(p.buffer.get() + (at - part->start), src + (at - op.offset), n);
          p.Cover(at - part->start, at - part->start + n);
          if (p.covered_bytes == part->length) {
            if (absl::Status s = SubmitBuffered(part->index); !s.ok()) {
              return s;
            }
          }
        }
        end_ = std::max(end_, at + n);
        at += n;
      }
    }
    if (absl::Status s = direct.Wait(); !s.ok()) return Named(s);
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (closed_) return absl::FailedPreconditionError(absl::StrCat("sync ", path_, ": closed"));
    if (synced_) return absl::OkStatus();
    if (absl::Status s = buffered_.Wait(); !s.ok()) return Named(s);
    const std::string& bucket = backend_.options().bucket;
    std::optional<PartSchedule::Range> last = schedule_.At(end_ == 0 ? 0 : end_ - 1);
    if (upload_id_.empty() && last.has_value() && last->index == 0) {
      // One part: one PUT.
      const Part* p = parts_.count(0) ? &parts_[0] : nullptr;
      const char* body = p != nullptr && p->buffer != nullptr ? p->buffer.get() : Zeros();
      if (absl::Status s = backend_.client().PutObject(bucket, key_, {body, end_}); !s.ok()) {
        return Named(s);
      }
      synced_ = true;
      ReleaseBuffers();
      return absl::OkStatus();
    }
    // What is left, short parts included, then the whole in order.
    Completion rest;
    uint64_t at = 0;
    while (at < end_) {
      std::optional<PartSchedule::Range> part = schedule_.At(at);
      const uint64_t length = std::min(part->length, end_ - part->start);
      Part& p = parts_[part->index];
      if (!p.submitted) {
        const char* body = p.buffer != nullptr ? p.buffer.get() : Zeros();
        if (absl::Status s = Submit(part->index, body, length, rest); !s.ok()) {
          (void)rest.Wait();
          return s;
        }
      }
      at = part->start + part->length;
    }
    if (absl::Status s = rest.Wait(); !s.ok()) return Named(s);
    std::vector<std::string> etags;
    {
      absl::MutexLock lock(&mu_);
      etags.reserve(etags_.size());
      for (int i = 0; i <= last->index; ++i) {
        auto it = etags_.find(i);
        if (it == etags_.end()) {
          return absl::InternalError(absl::StrCat("write ", path_, ": part ", i + 1,
                                                  " has no ETag (upload ", upload_id_, ")"));
        }
        etags.push_back(it->second);
      }
    }
    if (absl::Status s = backend_.client().CompleteMultipartUpload(bucket, key_, upload_id_, etags);
        !s.ok()) {
      // A retried Complete whose first answer was lost finds the upload
      // gone (NoSuchUpload): the object being there, whole, says it landed.
      absl::StatusOr<ObjectInfo> landed = backend_.client().HeadObject(bucket, key_);
      if (!absl::IsNotFound(s) || !landed.ok() || landed->size != end_) return Named(s);
    }
    synced_ = true;
    ReleaseBuffers();
    return absl::OkStatus();
  }

  // Completes the object if Sync has not: a closed file is whole.
  absl::Status Close() override {
    if (closed_) return absl::OkStatus();
    absl::Status s = synced_ ? absl::OkStatus() : Sync();
    closed_ = true;
    return s;
  }

 private:
  struct Part {
    std::unique_ptr<char[]> buffer;
    uint64_t length = 0;
    std::map<uint64_t, uint64_t> covered;  // start -> end, disjoint
    uint64_t covered_bytes = 0;
    bool submitted = false;

    // Writes may overlap (a rewrite before the part goes out): count each
    // byte once.
    void Cover(uint64_t start, uint64_t end) {
      auto it = covered.upper_bound(start);
      if (it != covered.begin() && std::prev(it)->second >= start) --it;
      while (it != covered.end() && it->first <= end) {
        start = std::min(start, it->first);
        end = std::max(end, it->second);
        covered_bytes -= it->second - it->first;
        it = covered.erase(it);
      }
      covered.emplace(start, end);
      covered_bytes += end - start;
    }
  };

  absl::Status Named(const absl::Status& s) const {
    if (absl::StrContains(s.message(), key_)) return s;
    return absl::Status(s.code(), absl::StrCat("write ", path_, ": ", s.message()));
  }

  absl::Status EnsureUpload() {
    if (!upload_id_.empty()) return absl::OkStatus();
    absl::StatusOr<std::string> id =
        backend_.client().CreateMultipartUpload(backend_.options().bucket, key_);
    if (!id.ok()) return Named(id.status());
    upload_id_ = *id;
    return absl::OkStatus();
  }

  absl::Status Submit(int index, const char* body, uint64_t length, Completion& done) {
    if (absl::Status s = EnsureUpload(); !s.ok()) return s;
    parts_[index].submitted = true;
    done.Run(transfers_, [this, index, body, length] {
      absl::StatusOr<std::string> etag = backend_.client().UploadPart(
          backend_.options().bucket, key_, upload_id_, index + 1, {body, length});
      if (etag.ok()) {
        absl::MutexLock lock(&mu_);
        etags_[index] = *etag;
      }
      return etag.status();
    });
    return absl::OkStatus();
  }

  // A copied part is complete: it goes out in the background and its buffer
  // is freed once sent.
  absl::Status SubmitBuffered(int index) {
    if (absl::Status s = EnsureUpload(); !s.ok()) return s;
    Part& p = parts_[index];
    p.submitted = true;
    char* buffer = p.buffer.release();
    const uint64_t length = p.length;
    {
      absl::MutexLock lock(&mu_);
      in_flight_bytes_ += length;
    }
    buffered_.Run(transfers_, [this, index, buffer, length] {
      absl::StatusOr<std::string> etag = backend_.client().UploadPart(
          backend_.options().bucket, key_, upload_id_, index + 1, {buffer, length});
      delete[] buffer;
      {
        absl::MutexLock lock(&mu_);
        if (etag.ok()) etags_[index] = *etag;
        buffered_bytes_ -= length;
        in_flight_bytes_ -= length;
      }
      return etag.status();
    });
    return absl::OkStatus();
  }

  // Makes room for a new part buffer within the file's share: waits for
  // copied parts in flight, and where none are (the buffers are parts that
  // writes left partly covered, such as encoded chunks' holes), sends the
  // lowest such part as it is, holes as zeros: a later write into it fails
  // (FAILED_PRECONDITION) rather than the file waiting forever.
  absl::Status ReserveBuffer(uint64_t length, int for_index) {
    const uint64_t limit =
        std::max<uint64_t>(backend_.options().max_buffered_bytes_per_file, length);
    while (true) {
      {
        absl::MutexLock lock(&mu_);
        struct Args {
          S3WritableFile* self;
          uint64_t limit, length;
        } args{this, limit, length};
        mu_.Await(absl::Condition(
            +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return a->self->buffered_bytes_ + a->length <= a->limit ||
                     a->self->in_flight_bytes_ == 0;
            },
            &args));
        if (buffered_bytes_ + length <= limit) {
          buffered_bytes_ += length;
          return absl::OkStatus();
        }
      }
      int lowest = -1;
      for (const auto& [index, part] : parts_) {
        if (index != for_index && !part.submitted && part.buffer != nullptr) {
          lowest = index;
          break;
        }
      }
      if (lowest < 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "write ", path_, ": more than ", limit, " bytes of parts are waiting to be filled"));
      }
      if (absl::Status s = SubmitBuffered(lowest); !s.ok()) return s;
    }
  }

  void ReleaseBuffers() {
    absl::MutexLock lock(&mu_);
    for (auto& [index, part] : parts_) {
      if (part.buffer != nullptr) buffered_bytes_ -= part.length;
      part.buffer.reset();
    }
  }

  S3Backend& backend_;
  TaskThreads& transfers_;
  const std::string path_;
  const std::string key_;
  const PartSchedule schedule_;
  std::map<int, Part> parts_;
  uint64_t end_ = 0;
  std::string upload_id_;
  bool synced_ = false;
  bool closed_ = false;
  Completion buffered_;
  absl::Mutex mu_;
  std::map<int, std::string> etags_ ABSL_GUARDED_BY(mu_);
  uint64_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;   // part buffers held
  uint64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of those, being sent
};

class S3ReadableFile : public ReadableFile {
 public:
  S3ReadableFile(S3Backend& backend, std::string path, std::string key, uint64_t size)
      : backend_(backend), path_(std::move(path)), key_(std::move(key)), size_(size) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset, void* dst, size_t length) override {
    if (offset >= size_) return size_t{0};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(length, size_ - offset));
    const IoOp op{offset, dst, n};
    if (absl::Status s = ReadBatch({&op, 1}); !s.ok()) return s;
    return n;
  }

  absl::Status ReadBatch(absl::Span<const IoOp> ops) override {
    size_t failed = 0;
    return backend_.ReadFiles({{this, ops}}, &failed);
  }

  absl::StatusOr<uint64_t> Size() override { return size_; }

  // The GETs that read the ops; DATA_LOSS, before any, for an op past the
  // object's end.
  absl::StatusOr<std::vector<RangedGet>> Plan(absl::Span<const IoOp> ops) const {
    for (const IoOp& op : ops) {
      if (op.offset > size_ || op.length > size_ - op.offset) {
        return absl::DataLossError(
            absl::StrFormat("read %s: %d bytes at %d are past its end (%d bytes)", path_, op.length,
                            op.offset, size_));
      }
    }
    return PlanRangedGets(ops, std::max<size_t>(backend_.options().read_range_bytes, 1 << 20),
                          backend_.options().read_gap_bytes);
  }

  absl::Status Get(const RangedGet& get) const {
    const absl::Status s =
        backend_.client().GetRange(backend_.options().bucket, key_, get.offset, get.pieces);
    return s.ok() ? s : Named(s);
  }

 private:
  absl::Status Named(const absl::Status& s) const {
    return absl::Status(s.code(), absl::StrCat("read ", path_, ": ", s.message()));
  }
  S3Backend& backend_;
  const std::string path_;
  const std::string key_;
  const uint64_t size_;
};

}  // namespace

absl::StatusOr<std::pair<std::string, std::string>> ParseS3Url(const std::string& url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "' is not an s3:// URL"));
  }
  const size_t slash = rest.find('/');
  const std::string bucket(rest.substr(0, slash));
  if (bucket.size() < 3 || bucket.size() > 63 ||
      bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "': the bucket name must be 3 to 63 of a-z 0-9 . -"));
  }
  const std::string prefix =
      slash == absl::string_view::npos ? "" : NormalizeKey(rest.substr(slash + 1));
  return std::make_pair(bucket, prefix);
}

S3Backend::S3Backend(S3BackendOptions options)
    : options_(std::move(options)),
      client_(std::make_unique<S3Client>(options_.client)),
      transfers_(std::make_unique<TaskThreads>(options_.transfer_threads)),
      leases_(std::make_unique<S3Leases>(options_.client, options_.bucket, options_.leases)) {}

S3Backend::~S3Backend() = default;

std::optional<RequestCounts> S3Backend::Requests() const {
  RequestCounts c;
  c.backend = "s3";
  // Data and leases go through clients of their own: both are requests.
  for (const S3Stats* s : {&client_->stats(), &leases_->stats()}) {
    c.requests += s->requests.load(std::memory_order_relaxed);
    c.retries += s->retries.load(std::memory_order_relaxed);
    c.throttles += s->throttles.load(std::memory_order_relaxed);
    c.failures += s->failures.load(std::memory_order_relaxed);
    c.bytes_sent += s->bytes_sent.load(std::memory_order_relaxed);
    c.bytes_received += s->bytes_received.load(std::memory_order_relaxed);
  }
  return c;
}

std::string S3Backend::Name() const {
  return absl::StrCat("s3 (", options_.client.endpoint, ", bucket ", options_.bucket, ")");
}

absl::StatusOr<std::string> S3Backend::KeyOf(const std::string& path) const {
  absl::string_view rest = path;
  if (!absl::ConsumePrefix(&rest, "s3://") || !absl::ConsumePrefix(&rest, options_.bucket) ||
      !(rest.empty() || rest[0] == '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not in s3://", options_.bucket, "/"));
  }
  return NormalizeKey(rest);
}

std::string S3Backend::PathOf(const std::string& key) const {
  return absl::StrCat("s3://", options_.bucket, "/", key);
}

absl::StatusOr<std::unique_ptr<S3Backend>> NewS3Backend(S3BackendOptions options) {
  if (Zeros() == nullptr) return absl::ResourceExhaustedError("s3: cannot map the zero pages");
  std::unique_ptr<S3Backend> backend(new S3Backend(std::move(options)));
  if (absl::Status s = backend->Probe(); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("s3 endpoint ", backend->options_.client.endpoint, " bucket ",
                                     backend->options_.bucket, ": ", s.message()));
  }
  return backend;
}

absl::Status S3Backend::Probe() {
  const std::string& bucket = options_.bucket;
  if (absl::Status s = client_->AnyWithPrefix(bucket, ".ckpt-probe").status(); !s.ok()) {
    return s;
  }
  absl::BitGen random;
  const std::string key = absl::StrFormat(".ckpt-probe/%016x", absl::Uniform<uint64_t>(random));
  // How many parts: AWS allows 10,000, Swift 1,000 unless configured; an
  // upload of one byte as the highest part number says which.
  limits_.max_parts = options_.max_parts;
  if (limits_.max_parts == 0) {
    absl::StatusOr<std::string> upload = client_->CreateMultipartUpload(bucket, key);
    if (!upload.ok()) return upload.status();
    for (int parts : {10000, 1000, 100}) {
      if (client_->UploadPart(bucket, key, *upload, parts, "x").ok()) {
        limits_.max_parts = parts;
        break;
      }
    }
    (void)client_->AbortMultipartUpload(bucket, key, *upload);
    if (limits_.max_parts == 0) {
      return absl::FailedPreconditionError("multipart uploads of 100 parts are refused");
    }
  }
  // Conditional create: a second If-None-Match: * PUT must be refused.
  // Swift's s3api refuses the header itself (501).
  absl::Status first = client_->PutObject(bucket, key, "probe", /*if_none_match=*/true);
  if (absl::IsUnimplemented(first) || absl::IsInvalidArgument(first)) {
    limits_.conditional_create = false;
    return absl::OkStatus();
  }
  if (!first.ok()) return first;
  absl::Status second = client_->PutObject(bucket, key, "probe", /*if_none_match=*/true);
  limits_.conditional_create = absl::IsAlreadyExists(second);
  (void)client_->DeleteObject(bucket, key);
  if (!second.ok() && !absl::IsAlreadyExists(second)) return second;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WritableFile>> S3Backend::NewWritableFile(const std::string& path) {
  absl::StatusOr<std::string> key = KeyOf(path);
  if (!key.ok()) return key.status();
  return std::make_unique<S3WritableFile>(*this, *transfers_, path, *key);
}

absl::StatusOr<std::unique_ptr<ReadableFile>> S3Backend::NewReadableFile(const std::string& path) {
  absl::StatusOr<std::string> key = KeyOf(path);
  if (!key.ok()) return key.status();
  absl::StatusOr<ObjectInfo> info = client_->HeadObject(options_.bucket, *key);
  if (absl::IsNotFound(info.status())) {
    absl::StatusOr<bool> dir = client_->AnyWithPrefix(options_.bucket, *key + "/");
    if (dir.ok() && *dir) {
      return absl::FailedPreconditionError(absl::StrCat("open ", path, ": a directory"));
    }
    return absl::NotFoundError(absl::StrCat("open ", path, ": No such file or directory"));
  }
  if (!info.ok())
    return absl::Status(info.status().code(),
                        absl::StrCat("open ", path, ": ", info.status().message()));
  return std::make_unique<S3ReadableFile>(*this, path, *key, info->size);
}

absl::Status S3Backend::CreateDirs(const std::string& path) { return KeyOf(path).status(); }
absl::Status S3Backend::SyncDir(const std::string& path) { return KeyOf(path).status(); }

absl::Status S3Backend::Rename(const std::string& from, const std::string& to) {
  absl::StatusOr<std::string> from_key = KeyOf(from);
  if (!from_key.ok()) return from_key.status();
  absl::StatusOr<std::string> to_key = KeyOf(to);
  if (!to_key.ok()) return to_key.status();
  absl::StatusOr<ObjectInfo> info = client_->HeadObject(options_.bucket, *from_key);
  if (absl::IsNotFound(info.status())) {
    absl::StatusOr<bool> dir = client_->AnyWithPrefix(options_.bucket, *from_key + "/");
    if (dir.ok() && *dir) {
      return absl::UnimplementedError(absl::StrCat(
          "rename ", from, " to ", to,
          ": an object store cannot rename a directory (its commit writes a commit object)"));
    }
    return absl::NotFoundError(absl::StrCat("rename ", from, ": No such file or directory"));
  }
  if (!info.ok()) return info.status();
  if (*from_key == *to_key) return absl::OkStatus();  // as rename(2)
  if (absl::Status s = client_->CopyObject(options_.bucket, *from_key, *to_key); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("rename ", from, " to ", to, ": ", s.message()));
  }
  return client_->DeleteObject(options_.bucket, *from_key);
}

absl::Status S3Backend::RenameNoReplace(const std::string& from, const std::string& to) {
  constexpr uint64_t kMaxConditionalBytes = 16 << 20;
  if (!limits_.conditional_create) return Backend::RenameNoReplace(from, to);
  absl::StatusOr<std::string> from_key = KeyOf(from);
  if (!from_key.ok()) return from_key.status();
  absl::StatusOr<std::string> to_key = KeyOf(to);
  if (!to_key.ok()) return to_key.status();
  // The server decides who wins: the conditional create of `to`.
  absl::StatusOr<std::string> contents =
      client_->GetObject(options_.bucket, *from_key, kMaxConditionalBytes);
  if (!contents.ok()) {
    return absl::Status(contents.status().code(), absl::StrCat("rename ", from, " to ", to, ": ",
                                                               contents.status().message()));
  }
  absl::Status s = client_->PutObject(options_.bucket, *to_key, *contents, /*if_none_match=*/true);
  if (absl::IsAlreadyExists(s)) {
    return absl::AlreadyExistsError(absl::StrCat("rename ", from, " to ", to, ": exists"));
  }
  if (!s.ok()) return s;
  return client_->DeleteObject(options_.bucket, *from_key);
}

absl::Status S3Backend::CreateFileExclusive(const std::string& path, const std::string& contents) {
  absl::StatusOr<std::string> key = KeyOf(path);
  if (!key.ok()) return key.status();
  const std::string& bucket = options_.bucket;
  auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("create ", path, ": ", s.message()));
  };
  if (limits_.conditional_create) {
    absl::Status s = client_->PutObject(bucket, *key, contents, /*if_none_match=*/true);
    return s.ok() ? s : named(s);
  }
  absl::StatusOr<ObjectInfo> existing = client_->HeadObject(bucket, *key);
  if (existing.ok()) return absl::AlreadyExistsError(absl::StrCat("create ", path, ": exists"));
  if (!absl::IsNotFound(existing.status())) return named(existing.status());
  if (absl::Status s = client_->PutObject(bucket, *key, contents); !s.ok()) return named(s);
  absl::StatusOr<std::string> back = client_->GetObject(bucket, *key, contents.size());
  if (!back.ok()) return named(back.status());
  if (*back != contents) {
    return absl::AlreadyExistsError(
        absl::StrCat("create ", path, ": another writer created it at the same time"));
  }
  return absl::OkStatus();
}

absl::Status S3Backend::RemoveAll(const std::string& path) {
  absl::StatusOr<std::string> key = KeyOf(path);
  if (!key.ok()) return key.status();
  if (!key->empty()) {
    if (absl::Status s = client_->DeleteObject(options_.bucket, *key); !s.ok()) return s;
  }
  const std::string prefix = key->empty() ? "" : *key + "/";
  absl::StatusOr<Listing> listing = client_->List(options_.bucket, prefix, "");
  if (!listing.ok()) return listing.status();
  absl::StatusOr<std::vector<MultipartUpload>> uploads =
      client_->ListMultipartUploads(options_.bucket, *key);
  if (!uploads.ok()) return uploads.status();
  Completion done;
  for (const MultipartUpload& upload : *uploads) {
    if (upload.key != *key && upload.key.compare(0, prefix.size(), prefix) != 0) continue;
    done.Run(*transfers_, [this, &upload] {
      return client_->AbortMultipartUpload(options_.bucket, upload.key, upload.upload_id);
    });
  }
  for (const ListedObject& object : listing->objects) {
    if (!absl::StartsWith(object.key, prefix)) continue;
    done.Run(*transfers_,
             [this, &object] { return client_->DeleteObject(options_.bucket, object.key); });
  }
  if (absl::Status s = done.Wait(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("remove ", path, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> S3Backend::ListUnfinishedFiles(const std::string& dir) {
  absl::StatusOr<std::string> key = KeyOf(dir);
  if (!key.ok()) return key.status();
  absl::StatusOr<std::vector<MultipartUpload>> uploads =
      client_->ListMultipartUploads(options_.bucket, key->empty() ? "" : *key + "/");
  if (!uploads.ok()) return uploads.status();
  std::vector<std::string> paths;
  const std::string prefix = key->empty() ? "" : *key + "/";
  for (const MultipartUpload& upload : *uploads) {
    if (absl::StartsWith(upload.key, prefix)) paths.push_back(PathOf(upload.key));
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

absl::StatusOr<std::vector<std::string>> S3Backend::ListDir(const std::string& path) {
  absl::StatusOr<std::string> key = KeyOf(path);
  if (!key.ok()) return key.status();
  const std::string prefix = key->empty() ? "" : *key + "/";
  absl::StatusOr<Listing> listing = client_->List(options_.bucket, prefix, "/");
  if (!listing.ok()) {
    return absl::Status(listing.status().code(),
                        absl::StrCat("list ", path, ": ", listing.status().message()));
  }
  std::vector<std::string> names;
  names.reserve(listing->objects.size() + listing->prefixes.size());
  // The server's answer is not trusted to stay under the prefix.
  for (const ListedObject& object : listing->objects) {
    if (!absl::StartsWith(object.key, prefix)) continue;
    names.push_back(object.key.substr(prefix.size()));
  }
  for (const std::string& p : listing->prefixes) {
    if (!absl::StartsWith(p, prefix)) continue;
    names.push_back(std::string(absl::StripSuffix(p.substr(prefix.size()), "/")));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  names.erase(std::remove(names.begin(), names.end(), ""), names.end());
  return names;
}

absl::StatusOr<bool> S3Backend::Exists(const std::string& path) {
  absl::StatusOr<std::string> key = KeyOf(path);
  if (!key.ok()) return key.status();
  if (key->empty()) return true;  // the bucket: the probe found it
  absl::StatusOr<ObjectInfo> info = client_->HeadObject(options_.bucket, *key);
  if (info.ok()) return true;
  if (!absl::IsNotFound(info.status())) return info.status();
  return client_->AnyWithPrefix(options_.bucket, *key + "/");
}

namespace {

// Both locks, the lease released first.
class LeasedLock : public FileLock {
 public:
  LeasedLock(std::unique_ptr<FileLock> local, std::unique_ptr<FileLock> lease)
      : local_(std::move(local)), lease_(std::move(lease)) {}
  ~LeasedLock() override { lease_.reset(); }

 private:
  std::unique_ptr<FileLock> local_;
  std::unique_ptr<FileLock> lease_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FileLock>> S3Backend::LockFile(const std::string& path,
                                                              LockMode mode, bool wait) {
  absl::StatusOr<std::string> key = KeyOf(path);
  if (!key.ok()) return key.status();
  // This process's holders wait here, without polling the store.
  absl::StatusOr<std::unique_ptr<FileLock>> local = Backend::LockFile(path, mode, wait);
  if (!local.ok()) return local.status();
  absl::StatusOr<std::unique_ptr<FileLock>> lease = leases_->Acquire(*key, mode, wait, path);
  if (!lease.ok()) return lease.status();
  auto held = std::make_unique<LeasedLock>(std::move(*local), std::move(*lease));
  // Removed while this waited for the lease: the path no longer names it.
  absl::StatusOr<bool> exists = Exists(path);
  if (!exists.ok()) return exists.status();
  if (!*exists) {
    return absl::NotFoundError(absl::StrCat("lock ", path, ": No such file or directory"));
  }
  return held;
}

absl::Status S3Backend::ReadFiles(absl::Span<const FileReads> reads, size_t* failed) {
  struct Get {
    const S3ReadableFile* file;
    size_t index;  // in reads
    RangedGet get;
  };
  std::vector<Get> gets;
  for (size_t i = 0; i < reads.size(); ++i) {
    const auto* file = dynamic_cast<const S3ReadableFile*>(reads[i].file);
    if (file == nullptr) return Backend::ReadFiles(reads, failed);  // not ours: one by one
    absl::StatusOr<std::vector<RangedGet>> planned = file->Plan(reads[i].ops);
    if (!planned.ok()) {
      *failed = i;
      return planned.status();
    }
    for (RangedGet& get : *planned) gets.push_back({file, i, std::move(get)});
  }
  if (gets.size() == 1) {  // one GET: on this thread
    *failed = gets[0].index;
    return gets[0].file->Get(gets[0].get);
  }
  std::vector<absl::Status> results(gets.size());  // each written by its own GET only
  Completion done;
  for (size_t k = 0; k < gets.size(); ++k) {
    done.Run(*transfers_, [&, k] { return results[k] = gets[k].file->Get(gets[k].get); });
  }
  const absl::Status s = done.Wait();
  for (size_t k = 0; k < gets.size(); ++k) {
    if (!results[k].ok()) {
      *failed = gets[k].index;
      return results[k];
    }
  }
  *failed = 0;
  return s;  // OK, or the backend stopping before a GET could run
}

absl::StatusOr<absl::Time> S3Backend::ModifiedTime(const std::string& path) {
  absl::StatusOr<std::string> key = KeyOf(path);
  if (!key.ok()) return key.status();
  absl::StatusOr<ObjectInfo> info = client_->HeadObject(options_.bucket, *key);
  if (info.ok()) return info->last_modified;
  if (!absl::IsNotFound(info.status())) return info.status();
  // A directory: its newest object.
  absl::StatusOr<Listing> listing = client_->List(options_.bucket, *key + "/", "");
  if (!listing.ok()) return listing.status();
  if (listing->objects.empty()) {
    return absl::NotFoundError(absl::StrCat("stat ", path, ": No such file or directory"));
  }
  absl::Time newest = absl::InfinitePast();
  for (const ListedObject& object : listing->objects) {
    newest = std::max(newest, object.last_modified);
  }
  return newest;
}

}  // namespace ckpt::storage::s3
