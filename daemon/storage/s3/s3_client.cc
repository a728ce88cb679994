#include "daemon/storage/s3/s3_client.h"

#include <algorithm>
#include <set>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "daemon/storage/s3/xml.h"

namespace ckpt::storage::s3 {
namespace {

constexpr char kUnsignedPayload[] = "UNSIGNED-PAYLOAD";
// Listings and error documents: far more than any page S3 sends.
constexpr size_t kMaxDocumentBytes = 16 << 20;

bool IsThrottle(long status, absl::string_view code) {
  return status == 429 || code == "SlowDown" || code == "Throttling" ||
         code == "ThrottlingException" || code == "RequestLimitExceeded" ||
         code == "TooManyRequests";
}

bool IsRetryable(long status, absl::string_view code) {
  // 501 Not Implemented is an answer: the server will not do it.
  return (status >= 500 && status != 501) || IsThrottle(status, code) || code == "RequestTimeout" ||
         code == "RequestTimeTooSkewed" || code == "InternalError" ||
         code == "ConditionalRequestConflict";
}

absl::Time ParseHttpDate(absl::string_view text) {
  absl::Time t;
  std::string err;
  if (absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", text, &t, &err)) return t;
  return absl::InfinitePast();
}

absl::Time ParseIsoDate(absl::string_view text) {
  absl::Time t;
  std::string err;
  if (absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", text, &t, &err)) return t;
  return absl::InfinitePast();
}

// Bounds a paginated listing that a server could make endless or huge:
// one deadline over all its pages, no page marker seen twice, no run of
// empty truncated pages, keys no longer than S3's 1,024 bytes, and a cap on
// the bytes of all the names together.
class PageGuard {
 public:
  PageGuard(std::string what, absl::Duration deadline)
      : what_(std::move(what)), deadline_(absl::Now() + deadline) {}

  absl::Status Name(absl::string_view name) {
    if (name.size() > kMaxKeyBytes) {
      return absl::DataLossError(
          absl::StrCat(what_, ": a key of ", name.size(), " bytes (S3's are at most 1,024)"));
    }
    bytes_ += name.size();
    if (bytes_ > kMaxListingBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what_, ": more than ", kMaxListingBytes, " bytes of names"));
    }
    return absl::OkStatus();
  }

  // Before asking for the page after one that held `entries`, at `marker`.
  absl::Status Next(const std::string& marker, size_t entries) {
    empty_run_ = entries == 0 ? empty_run_ + 1 : 0;
    if (empty_run_ > 3) {
      return absl::DataLossError(absl::StrCat(what_, ": truncated pages with nothing on them"));
    }
    if (marker.empty() || marker.size() > kMaxKeyBytes * 2 || !seen_.insert(marker).second) {
      return absl::DataLossError(
          absl::StrCat(what_, ": a truncated page without a new continuation marker"));
    }
    if (absl::Now() > deadline_) {
      return absl::DeadlineExceededError(absl::StrCat(what_, ": the listing took too long"));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxListingBytes = size_t{256} << 20;
  const std::string what_;
  const absl::Time deadline_;
  size_t bytes_ = 0;
  int empty_run_ = 0;
  std::set<std::string> seen_;
};

std::string Unquote(std::string s) {
  return std::string(absl::StripPrefix(absl::StripSuffix(s, "\""), "\""));
}

}  // namespace

std::pair<std::string, std::string> ParseS3Error(absl::string_view body) {
  std::string code = XmlText(body, "Code").value_or("");
  std::string message = XmlText(body, "Message").value_or("");
  // A server's text goes into our errors: keep it short and printable.
  auto clean = [](std::string s) {
    if (s.size() > 200) s.resize(200);
    for (char& c : s) {
      if (!absl::ascii_isprint(static_cast<unsigned char>(c))) c = '?';
    }
    return s;
  };
  return {clean(std::move(code)), clean(std::move(message))};
}

S3Client::S3Client(S3ClientOptions options) : options_(std::move(options)) {
  absl::string_view endpoint = options_.endpoint;
  if (absl::ConsumePrefix(&endpoint, "https://")) {
    scheme_ = "https";
  } else {
    absl::ConsumePrefix(&endpoint, "http://");
    scheme_ = "http";
  }
  authority_ = std::string(absl::StripSuffix(endpoint, "/"));
}

std::string S3Client::Describe(const Call& call) const {
  return absl::StrCat("S3 ", call.method, " ", call.bucket, "/", call.key);
}

std::string S3Client::Url(const Call& call) const {
  std::string url =
      options_.virtual_host
          ? absl::StrCat(scheme_, "://", call.bucket, ".", authority_, "/",
                         UriEncode(call.key, /*keep_slash=*/true))
          : absl::StrCat(scheme_, "://", authority_, "/", call.bucket, call.key.empty() ? "" : "/",
                         UriEncode(call.key, /*keep_slash=*/true));
  for (size_t i = 0; i < call.query.size(); ++i) {
    absl::StrAppend(&url, i == 0 ? "?" : "&", UriEncode(call.query[i].first, false), "=",
                    UriEncode(call.query[i].second, false));
  }
  return url;
}

absl::StatusOr<HttpResponse> S3Client::Execute(const Call& call) {
  const absl::Time deadline = absl::Now() + options_.retry.deadline;
  const std::string host =
      options_.virtual_host ? absl::StrCat(call.bucket, ".", authority_) : authority_;
  const std::string path =
      options_.virtual_host ? absl::StrCat("/", call.key)
                            : absl::StrCat("/", call.bucket, call.key.empty() ? "" : "/", call.key);
  const std::string payload_hash = options_.sign_payload || call.body.size() < (64 << 10)
                                       ? Sha256Hex(call.body)
                                       : kUnsignedPayload;
  const std::string url = Url(call);
  absl::BitGen jitter;
  absl::Status last;
  for (int attempt = 1;; ++attempt) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      stats_.failures.fetch_add(1, std::memory_order_relaxed);
      return absl::DeadlineExceededError(
          absl::StrCat(Describe(call), ": gave up after ", attempt - 1, " attempts over ",
                       absl::FormatDuration(options_.retry.deadline), " (", last.message(), ")"));
    }
    SigningRequest signing;
    signing.method = call.method;
    signing.path = path;
    signing.query = call.query;
    signing.headers = call.headers;
    signing.headers.emplace_back("host", host);
    signing.headers.emplace_back("x-amz-date", AmzDate(now));
    signing.headers.emplace_back("x-amz-content-sha256", payload_hash);
    if (!options_.credentials.session_token.empty()) {
      signing.headers.emplace_back("x-amz-security-token", options_.credentials.session_token);
    }
    signing.payload_sha256 = payload_hash;
    const Signature signature =
        SignV4(signing, options_.credentials, Scope{.region = options_.region}, now);

    HttpRequest request;
    request.method = call.method;
    request.url = url;
    request.headers = std::move(signing.headers);
    request.headers.emplace_back("Authorization", signature.authorization);
    request.body = call.body;
    request.sink = call.sink;
    request.max_body = call.max_body;
    request.timeout = std::min(options_.attempt_timeout, deadline - now);
    request.stall_timeout = options_.stall_timeout;
    request.ca_file = options_.ca_file;

    stats_.requests.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<HttpResponse> response = PerformHttp(request);
    if (response.ok()) {
      stats_.bytes_sent.fetch_add(call.body.size(), std::memory_order_relaxed);
      stats_.bytes_received.fetch_add(response->body_bytes, std::memory_order_relaxed);
      if (response->status >= 200 && response->status < 300) return response;
      const auto [code, message] = ParseS3Error(response->body);
      if (IsThrottle(response->status, code)) {
        stats_.throttles.fetch_add(1, std::memory_order_relaxed);
      }
      if (!IsRetryable(response->status, code)) return response;
      last = Failure(call, *response);
    } else if (response.status().code() == absl::StatusCode::kResourceExhausted) {
      stats_.failures.fetch_add(1, std::memory_order_relaxed);
      return response.status();
    } else {
      last = response.status();
    }
    // Full jitter: a random wait up to an exponentially growing cap, so
    // that many writers throttled together do not return together.
    const absl::Duration cap = std::min(options_.retry.max_delay,
                                        options_.retry.base_delay * (1LL << std::min(attempt, 20)));
    const absl::Duration wait = std::min(
        absl::Nanoseconds(absl::Uniform<int64_t>(jitter, 0, absl::ToInt64Nanoseconds(cap) + 1)),
        deadline - absl::Now());
    stats_.retries.fetch_add(1, std::memory_order_relaxed);
    if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
  }
}

absl::Status S3Client::Failure(const Call& call, const HttpResponse& response) const {
  const auto [code, message] = ParseS3Error(response.body);
  const std::string text =
      absl::StrCat(Describe(call), ": ", response.status, code.empty() ? "" : " ", code,
                   message.empty() ? "" : ": ", message);
  switch (response.status) {
    case 404:
      return absl::NotFoundError(text);
    case 403:
      return absl::PermissionDeniedError(text);
    case 412:
      return absl::FailedPreconditionError(text);
    case 501:
      return absl::UnimplementedError(text);
    case 416:
      return absl::OutOfRangeError(text);
    case 400:
      return IsRetryable(response.status, code) ? absl::UnavailableError(text)
                                                : absl::InvalidArgumentError(text);
    default:
      if (response.status >= 500 || IsThrottle(response.status, code)) {
        return absl::UnavailableError(text);
      }
      return absl::UnknownError(text);
  }
}

absl::Status S3Client::PutObject(const std::string& bucket, const std::string& key,
                                 absl::string_view body, bool if_none_match) {
  Call call("PUT", bucket, key);
  call.body = body;
  if (if_none_match) call.headers.emplace_back("If-None-Match", "*");
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 == 2) return absl::OkStatus();
  absl::Status failure = Failure(call, *r);
  if (if_none_match && r->status == 412) {
    return absl::AlreadyExistsError(failure.message());
  }
  return failure;
}

absl::Status S3Client::GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                                size_t length, char* dst) {
  const SinkPiece piece{dst, length};
  return GetRange(bucket, key, offset, {&piece, 1});
}

absl::Status S3Client::GetRange(const std::string& bucket, const std::string& key, uint64_t offset,
                                absl::Span<const SinkPiece> pieces) {
  size_t length = 0;
  for (const SinkPiece& p : pieces) length += p.length;
  if (length == 0) return absl::OkStatus();
  Call call("GET", bucket, key);
  call.sink = pieces;
  call.max_body = kMaxDocumentBytes;
  call.headers.emplace_back("Range", absl::StrCat("bytes=", offset, "-", offset + length - 1));
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 != 2) return Failure(call, *r);
  // 200 is the whole object: only right when that is the range asked for.
  // The bytes must have gone to dst, and a 206 must be the range asked for.
  const std::string range = r->Header("content-range");
  const bool range_ok =
      r->status != 206 ||
      absl::StartsWith(range, absl::StrCat("bytes ", offset, "-", offset + length - 1, "/"));
  if ((r->status != 206 && offset != 0) || r->sink_bytes != length || !range_ok) {
    return absl::DataLossError(absl::StrCat(Describe(call), ": asked for ", length, " bytes at ",
                                            offset, ", got ", r->body_bytes, " (status ", r->status,
                                            ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> S3Client::GetObject(const std::string& bucket, const std::string& key,
                                                uint64_t max_bytes) {
  absl::StatusOr<ObjectInfo> info = HeadObject(bucket, key);
  if (!info.ok()) return info.status();
  if (info->size > max_bytes) {
    return absl::FailedPreconditionError(absl::StrCat("S3 GET ", bucket, "/", key, ": ", info->size,
                                                      " bytes, more than the ", max_bytes,
                                                      " allowed"));
  }
  // The object may change between HEAD and GET: the GET is bounded by what
  // HEAD said, and a longer answer is an error, not an allocation.
  Call call("GET", bucket, key);
  call.max_body = static_cast<size_t>(std::max<uint64_t>(info->size, 4096));
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 != 2) return Failure(call, *r);
  return std::move(r->body);
}

absl::StatusOr<ObjectInfo> S3Client::HeadObject(const std::string& bucket, const std::string& key) {
  Call call("HEAD", bucket, key);
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 != 2) return Failure(call, *r);
  ObjectInfo info;
  if (!absl::SimpleAtoi(r->Header("content-length"), &info.size)) {
    return absl::DataLossError(absl::StrCat(Describe(call), ": no Content-Length"));
  }
  info.last_modified = ParseHttpDate(r->Header("last-modified"));
  info.etag = Unquote(r->Header("etag"));
  return info;
}

absl::Status S3Client::CopyObject(const std::string& bucket, const std::string& from_key,
                                  const std::string& to_key) {
  Call call("PUT", bucket, to_key);
  call.max_body = kMaxDocumentBytes;
  call.headers.emplace_back("x-amz-copy-source",
                            absl::StrCat("/", bucket, "/", UriEncode(from_key, true)));
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  // Like Complete, a copy may fail after its 200.
  if (r->status / 100 != 2 || !XmlElements(r->body, "Error").empty()) {
    HttpResponse failed = *r;
    if (failed.status / 100 == 2) failed.status = 500;
    return Failure(call, failed);
  }
  return absl::OkStatus();
}

absl::Status S3Client::DeleteObject(const std::string& bucket, const std::string& key) {
  Call call("DELETE", bucket, key);
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 == 2 || r->status == 404) return absl::OkStatus();
  return Failure(call, *r);
}

absl::StatusOr<Listing> S3Client::List(const std::string& bucket, const std::string& prefix,
                                       const std::string& delimiter, size_t max_entries) {
  Listing listing;
  std::string token;
  PageGuard guard(absl::StrCat("S3 LIST ", bucket, "/", prefix), 4 * options_.retry.deadline);
  while (true) {
    const size_t before = listing.objects.size() + listing.prefixes.size();
    Call call("GET", bucket);
    call.max_body = kMaxDocumentBytes;
    call.query = {{"list-type", "2"}, {"prefix", prefix}};
    if (!delimiter.empty()) call.query.emplace_back("delimiter", delimiter);
    if (!token.empty()) call.query.emplace_back("continuation-token", token);
    absl::StatusOr<HttpResponse> r = Execute(call);
    if (!r.ok()) return r.status();
    if (r->status / 100 != 2) return Failure(call, *r);
    for (absl::string_view contents : XmlElements(r->body, "Contents")) {
      std::optional<std::string> key = XmlText(contents, "Key");
      if (!key.has_value()) continue;
      if (absl::Status s = guard.Name(*key); !s.ok()) return s;
      ListedObject object{.key = std::move(*key)};
      (void)absl::SimpleAtoi(XmlText(contents, "Size").value_or(""), &object.size);
      object.last_modified = ParseIsoDate(XmlText(contents, "LastModified").value_or(""));
      listing.objects.push_back(std::move(object));
    }
    for (absl::string_view common : XmlElements(r->body, "CommonPrefixes")) {
      if (std::optional<std::string> p = XmlText(common, "Prefix"); p.has_value()) {
        if (absl::Status s = guard.Name(*p); !s.ok()) return s;
        listing.prefixes.push_back(std::move(*p));
      }
    }
    if (listing.objects.size() + listing.prefixes.size() > max_entries) {
      return absl::ResourceExhaustedError(
          absl::StrCat("S3 LIST ", bucket, "/", prefix, ": more than ", max_entries, " entries"));
    }
    const std::string truncated = XmlText(r->body, "IsTruncated").value_or("false");
    std::string next = XmlText(r->body, "NextContinuationToken").value_or("");
    if (truncated != "true") break;
    if (absl::Status s =
            guard.Next(next, listing.objects.size() + listing.prefixes.size() - before);
        !s.ok()) {
      return s;
    }
    token = std::move(next);
  }
  return listing;
}

absl::StatusOr<bool> S3Client::AnyWithPrefix(const std::string& bucket, const std::string& prefix) {
  Call call("GET", bucket);
  call.max_body = kMaxDocumentBytes;
  call.query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", "1"}};
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 != 2) return Failure(call, *r);
  return !XmlElements(r->body, "Contents").empty();
}

absl::StatusOr<std::string> S3Client::CreateMultipartUpload(const std::string& bucket,
                                                            const std::string& key) {
  Call call("POST", bucket, key);
  call.query = {{"uploads", ""}};
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 != 2) return Failure(call, *r);
  std::optional<std::string> id = XmlText(r->body, "UploadId");
  if (!id.has_value() || id->empty()) {
    return absl::DataLossError(absl::StrCat(Describe(call), ": no UploadId in the answer"));
  }
  return *id;
}

absl::StatusOr<std::string> S3Client::UploadPart(const std::string& bucket, const std::string& key,
                                                 const std::string& upload_id, int part_number,
                                                 absl::string_view body) {
  Call call("PUT", bucket, key);
  call.body = body;
  call.query = {{"partNumber", absl::StrCat(part_number)}, {"uploadId", upload_id}};
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) {
    return absl::Status(
        r.status().code(),
        absl::StrCat(r.status().message(), " (part ", part_number, " of upload ", upload_id, ")"));
  }
  if (r->status / 100 != 2) {
    absl::Status s = Failure(call, *r);
    return absl::Status(
        s.code(), absl::StrCat(s.message(), " (part ", part_number, " of upload ", upload_id, ")"));
  }
  std::string etag = r->Header("etag");
  if (etag.empty()) {
    return absl::DataLossError(
        absl::StrCat(Describe(call), ": no ETag for part ", part_number, " of upload ", upload_id));
  }
  return etag;
}

absl::Status S3Client::CompleteMultipartUpload(const std::string& bucket, const std::string& key,
                                               const std::string& upload_id,
                                               const std::vector<std::string>& etags) {
  std::string body = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    absl::StrAppend(&body, "<Part><PartNumber>", i + 1, "</PartNumber><ETag>", XmlEscape(etags[i]),
                    "</ETag></Part>");
  }
  body += "</CompleteMultipartUpload>";
  Call call("POST", bucket, key);
  call.query = {{"uploadId", upload_id}};
  call.body = body;
  call.max_body = kMaxDocumentBytes;
  absl::StatusOr<HttpResponse> r = Execute(call);
  auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(s.message(), " (upload ", upload_id, ")"));
  };
  if (!r.ok()) return named(r.status());
  // S3 may answer 200 and put the error in the body.
  if (r->status / 100 != 2 || !XmlElements(r->body, "Error").empty()) {
    HttpResponse failed = *r;
    if (failed.status / 100 == 2) failed.status = 500;
    return named(Failure(call, failed));
  }
  return absl::OkStatus();
}

absl::Status S3Client::AbortMultipartUpload(const std::string& bucket, const std::string& key,
                                            const std::string& upload_id) {
  Call call("DELETE", bucket, key);
  call.query = {{"uploadId", upload_id}};
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 == 2 || r->status == 404) return absl::OkStatus();
  return Failure(call, *r);
}

absl::StatusOr<std::vector<MultipartUpload>> S3Client::ListMultipartUploads(
    const std::string& bucket, const std::string& prefix, size_t max_entries) {
  std::vector<MultipartUpload> uploads;
  std::string key_marker, upload_marker;
  PageGuard guard(absl::StrCat("S3 list uploads ", bucket, "/", prefix),
                  4 * options_.retry.deadline);
  while (true) {
    const size_t before = uploads.size();
    Call call("GET", bucket);
    call.max_body = kMaxDocumentBytes;
    call.query = {{"uploads", ""}, {"prefix", prefix}};
    if (!key_marker.empty()) call.query.emplace_back("key-marker", key_marker);
    if (!upload_marker.empty()) call.query.emplace_back("upload-id-marker", upload_marker);
    absl::StatusOr<HttpResponse> r = Execute(call);
    if (!r.ok()) return r.status();
    if (r->status / 100 != 2) return Failure(call, *r);
    for (absl::string_view upload : XmlElements(r->body, "Upload")) {
      MultipartUpload u{.key = XmlText(upload, "Key").value_or(""),
                        .upload_id = XmlText(upload, "UploadId").value_or("")};
      u.initiated = ParseIsoDate(XmlText(upload, "Initiated").value_or(""));
      if (absl::Status s = guard.Name(u.key); !s.ok()) return s;
      if (absl::Status s = guard.Name(u.upload_id); !s.ok()) return s;
      if (!u.key.empty() && !u.upload_id.empty()) uploads.push_back(std::move(u));
    }
    if (uploads.size() > max_entries) {
      return absl::ResourceExhaustedError(absl::StrCat("S3 list uploads ", bucket, "/", prefix,
                                                       ": more than ", max_entries, " uploads"));
    }
    if (XmlText(r->body, "IsTruncated").value_or("false") != "true") break;
    std::string next_key = XmlText(r->body, "NextKeyMarker").value_or("");
    std::string next_upload = XmlText(r->body, "NextUploadIdMarker").value_or("");
    if (absl::Status s =
            guard.Next(absl::StrCat(next_key, "\n", next_upload), uploads.size() - before);
        !s.ok()) {
      return s;
    }
    key_marker = std::move(next_key);
    upload_marker = std::move(next_upload);
  }
  return uploads;
}

absl::Status S3Client::CreateBucket(const std::string& bucket) {
  Call call("PUT", bucket);
  absl::StatusOr<HttpResponse> r = Execute(call);
  if (!r.ok()) return r.status();
  if (r->status / 100 == 2) return absl::OkStatus();
  const auto [code, message] = ParseS3Error(r->body);
  if (code == "BucketAlreadyOwnedByYou") return absl::OkStatus();
  return Failure(call, *r);
}

}  // namespace ckpt::storage::s3
