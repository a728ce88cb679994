// One HTTP exchange over libcurl, for the S3 client (s3_client.h): the
// request body is sent from the caller's memory (never copied), and the
// response body lands in the caller's buffer or in a string whose size is
// bounded before anything is allocated, since the server is not trusted to
// send what it said it would.
//
// Connections are kept per thread (one curl handle each) and reused across
// requests, as S3 clients must to reach a server's throughput.
#ifndef CKPT_DAEMON_STORAGE_S3_HTTP_H_
#define CKPT_DAEMON_STORAGE_S3_HTTP_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ckpt::storage::s3 {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// One piece of where a response body goes. A null dst skips its bytes: the
// gap between two ranges read with one request.
struct SinkPiece {
  char* dst = nullptr;
  size_t length = 0;
};

struct HttpRequest {
  std::string method;
  std::string url;
  HttpHeaders headers;
  absl::string_view body;  // sent as is; must outlive the call
  // Where a 2xx response body goes: into the pieces, in order, when there
  // are any (more than they hold is an error), else into
  // HttpResponse::body, at most max_body bytes (more is an error).
  absl::Span<const SinkPiece> sink;  // must outlive the call
  size_t max_body = 1 << 20;
  absl::Duration timeout = absl::Seconds(60);  // the whole exchange
  // The exchange is abandoned when fewer than 1 KiB/s move for this long:
  // a stalled server or link fails fast instead of at `timeout`.
  absl::Duration stall_timeout = absl::Seconds(10);
  std::string ca_file;  // HTTPS: a CA bundle; empty: the system's
};

struct HttpResponse {
  long status = 0;
  HttpHeaders headers;  // names lower-cased
  std::string body;     // when no sink was given
  size_t body_bytes = 0;
  size_t sink_bytes = 0;  // of those, into the sink's pieces
  // The value of a header (first of that name), or "".
  std::string Header(absl::string_view lower_name) const;
};

// UNAVAILABLE for a failure to exchange (refused, reset, stalled, timed
// out), naming the method, the URL and curl's reason; RESOURCE_EXHAUSTED
// when the body is longer than allowed. Any HTTP status is a response.
absl::StatusOr<HttpResponse> PerformHttp(const HttpRequest& request);

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_HTTP_H_
