// An S3 client: the requests the object-store backend (s3_backend.h) needs,
// signed with AWS Signature V4 (sigv4.h) and sent over libcurl (http.h),
// each retried under one deadline.
//
// Retries: a failure to exchange (refused, reset, stalled, timed out), any
// 5xx, 429, and the throttling and timeout codes S3 sends as 400 (SlowDown,
// Throttling, RequestTimeout) are retried with exponential backoff and full
// jitter until RetryPolicy::deadline; other answers are final. Errors read
// "S3 <METHOD> <bucket>/<key>: <status> <Code>: <Message>" plus how many
// attempts were made, with a code the caller can act on (NOT_FOUND,
// PERMISSION_DENIED, ALREADY_EXISTS for a refused conditional create,
// UNAVAILABLE when retries ran out, DEADLINE_EXCEEDED when time did).
//
// Thread-safe: one client serves all the daemon's writer and reader threads.
#ifndef CKPT_DAEMON_STORAGE_S3_S3_CLIENT_H_
#define CKPT_DAEMON_STORAGE_S3_S3_CLIENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/storage/s3/http.h"
#include "daemon/storage/s3/sigv4.h"

namespace ckpt::storage::s3 {

struct RetryPolicy {
  absl::Duration base_delay = absl::Milliseconds(50);
  absl::Duration max_delay = absl::Seconds(5);
  // All attempts of one request end by then.
  absl::Duration deadline = absl::Minutes(2);
};

struct S3ClientOptions {
  // "http://host:port" or "https://host": no path.
  std::string endpoint;
  std::string region = "us-east-1";
  // Virtual-host addressing (https://bucket.host/key) instead of
  // path-style (https://host/bucket/key).
  bool virtual_host = false;
  std::string ca_file;  // HTTPS: a CA bundle; empty: the system's
  Credentials credentials;
  RetryPolicy retry;
  absl::Duration attempt_timeout = absl::Seconds(120);  // one exchange
  absl::Duration stall_timeout = absl::Seconds(10);     // < 1 KiB/s this long
  // Hash every payload into the signature (x-amz-content-sha256). Costs a
  // SHA-256 pass over every byte; off, data is sent as UNSIGNED-PAYLOAD and
  // its integrity rests on TLS and on the CRC32C each chunk carries.
  bool sign_payload = false;
};

// Counters since the client was made; read by metrics.
struct S3Stats {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> throttles{0};  // 503 SlowDown, 429, Throttling
  std::atomic<uint64_t> failures{0};   // requests that gave up
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
};

struct ObjectInfo {
  uint64_t size = 0;
  absl::Time last_modified = absl::InfinitePast();
  std::string etag;
};

struct ListedObject {
  std::string key;
  uint64_t size = 0;
  absl::Time last_modified = absl::InfinitePast();
};
struct Listing {
  std::vector<ListedObject> objects;
  std::vector<std::string> prefixes;  // common prefixes, with the delimiter
};

struct MultipartUpload {
  std::string key;
  std::string upload_id;
  absl::Time initiated = absl::InfinitePast();
};

class S3Client {
 public:
  explicit S3Client(S3ClientOptions options);

  const S3ClientOptions& options() const { return options_; }
  const S3Stats& stats() const { return stats_; }

  // if_none_match: the object must not exist yet (If-None-Match: *);
  // ALREADY_EXISTS when it does and the server honours the condition.
  absl::Status PutObject(const std::string& bucket, const std::string& key, absl::string_view body,
                         bool if_none_match = false);
  // Reads exactly `length` bytes at `offset` into dst (a ranged GET);
  // OUT_OF_RANGE when the object ends before, DATA_LOSS when the server
  // sends a different count.
  absl::Status GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                        size_t length, char* dst);
  // One ranged GET from `offset` scattered over the pieces in order (a null
  // piece skips its bytes): several nearby reads for one request.
  absl::Status GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                        absl::Span<const SinkPiece> pieces);
  // The whole object; FAILED_PRECONDITION, before reading it, when it is
  // larger than max_bytes.
  absl::StatusOr<std::string> GetObject(const std::string& bucket, const std::string& key,
                                        uint64_t max_bytes);
  absl::StatusOr<ObjectInfo> HeadObject(const std::string& bucket, const std::string& key);
  // A server-side copy of one object (up to 5 GiB).
  absl::Status CopyObject(const std::string& bucket, const std::string& from_key,
                          const std::string& to_key);
  // OK when the object does not exist.
  absl::Status DeleteObject(const std::string& bucket, const std::string& key);
  // Every object under prefix (all pages), with keys grouped at delimiter
  // when it is not empty; RESOURCE_EXHAUSTED beyond max_entries.
  absl::StatusOr<Listing> List(const std::string& bucket, const std::string& prefix,
                               const std::string& delimiter, size_t max_entries = 1 << 20);
  // Whether any object has this prefix (one page of one key).
  absl::StatusOr<bool> AnyWithPrefix(const std::string& bucket, const std::string& prefix);

  absl::StatusOr<std::string> CreateMultipartUpload(const std::string& bucket,
                                                    const std::string& key);
  // The part's ETag.
  absl::StatusOr<std::string> UploadPart(const std::string& bucket, const std::string& key,
                                         const std::string& upload_id, int part_number,
                                         absl::string_view body);
  // etags[i] is part i + 1's.
  absl::Status CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                       const std::string& upload_id,
                                       const std::vector<std::string>& etags);
  // OK when the upload is already gone.
  absl::Status AbortMultipartUpload(const std::string& bucket, const std::string& key,
                                    const std::string& upload_id);
  absl::StatusOr<std::vector<MultipartUpload>> ListMultipartUploads(const std::string& bucket,
                                                                    const std::string& prefix,
                                                                    size_t max_entries = 1 << 20);

  // Creates the bucket (tests and benchmarks); OK when it is already ours.
  absl::Status CreateBucket(const std::string& bucket);

 private:
  struct Call {
    Call(std::string method, std::string bucket, std::string key = "")
        : method(std::move(method)), bucket(std::move(bucket)), key(std::move(key)) {}
    std::string method;
    std::string bucket;
    std::string key;  // "" for the bucket itself
    std::vector<std::pair<std::string, std::string>> query;
    HttpHeaders headers;
    absl::string_view body;
    absl::Span<const SinkPiece> sink;
    size_t max_body = 1 << 20;
  };
  // The response of the last attempt: 2xx, or an answer not worth
  // retrying (the caller maps it with Failure). An error when attempts or
  // time ran out.
  absl::StatusOr<HttpResponse> Execute(const Call& call);
  absl::Status Failure(const Call& call, const HttpResponse& response) const;
  std::string Url(const Call& call) const;
  std::string Describe(const Call& call) const;

  const S3ClientOptions options_;
  std::string scheme_;     // "http" or "https"
  std::string authority_;  // host[:port]
  mutable S3Stats stats_;
};

// The error code and message of an S3 error document ("" when absent).
std::pair<std::string, std::string> ParseS3Error(absl::string_view body);

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_S3_CLIENT_H_
