// A minimal HTTP/1.0 GET over a TCP socket, for tests that read /metrics or
// Prometheus' HTTP API: no client library, and HTTP/1.0 keeps the reply
// free of chunked encoding (the body is everything after the headers).
#ifndef CKPT_TESTS_SUPPORT_HTTP_GET_H_
#define CKPT_TESTS_SUPPORT_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ckpt::testing {

struct HttpReply {
  int status = 0;  // 200, 404, ...
  std::string body;
};

// GET http://<host_port><path>; host_port is "127.0.0.1:<port>". Fails on a
// connection error or timeout, not on a non-200 status.
absl::StatusOr<HttpReply> HttpGet(const std::string& host_port, const std::string& path,
                                  absl::Duration timeout = absl::Seconds(10));

// Percent-encodes a query parameter's value (PromQL has spaces, braces,
// quotes).
std::string UrlEncode(const std::string& text);

// A TCP port on 127.0.0.1 that nothing listens on right now.
int FreeTcpPort();

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_HTTP_GET_H_
