#include "daemon/storage/s3/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ckpt::storage::s3 {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct EasyDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

// This thread's handle: its connection cache survives between requests.
CURL* ThreadHandle() {
  thread_local std::unique_ptr<CURL, EasyDeleter> handle;
  if (handle == nullptr) {
    GlobalInit();
    handle.reset(curl_easy_init());
  } else {
    curl_easy_reset(handle.get());
  }
  return handle.get();
}

struct Upload {
  absl::string_view body;
  size_t sent = 0;
};

size_t ReadBody(char* dst, size_t size, size_t count, void* user) {
  auto* upload = static_cast<Upload*>(user);
  const size_t n = std::min(size * count, upload->body.size() - upload->sent);
  std::memcpy(dst, upload->body.data() + upload->sent, n);
  upload->sent += n;
  return n;
}

int SeekBody(void* user, curl_off_t offset, int origin) {
  auto* upload = static_cast<Upload*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > upload->body.size()) {
    return CURL_SEEKFUNC_FAIL;
  }
  upload->sent = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

struct Download {
  const HttpRequest* request;
  HttpResponse* response;
  size_t sink_capacity = 0;  // the pieces' total
  size_t piece = 0;          // the piece the next byte goes to
  size_t piece_at = 0;       // and where in it
  bool overflow = false;
};

// Scatters n bytes over the pieces from where the last call stopped; the
// caller checked they fit.
void ToPieces(Download& d, const char* src, size_t n) {
  while (n > 0) {
    const SinkPiece& p = d.request->sink[d.piece];
    const size_t take = std::min(n, p.length - d.piece_at);
    if (p.dst != nullptr) std::memcpy(p.dst + d.piece_at, src, take);
    src += take;
    n -= take;
    d.piece_at += take;
    if (d.piece_at == p.length) {
      ++d.piece;
      d.piece_at = 0;
    }
  }
}

size_t WriteBody(char* src, size_t size, size_t count, void* user) {
  auto* d = static_cast<Download*>(user);
  const size_t n = size * count;
  // An error document goes to body even when a sink was given: the sink is
  // for the object's bytes.
  const bool to_sink =
      !d->request->sink.empty() && d->response->status >= 200 && d->response->status < 300;
  const size_t limit = to_sink ? d->sink_capacity : d->request->max_body;
  if (n > limit - d->response->body_bytes) {
    d->overflow = true;
    return 0;  // curl fails the transfer with CURLE_WRITE_ERROR
  }
  if (to_sink) {
    ToPieces(*d, src, n);
    d->response->sink_bytes += n;
  } else {
    d->response->body.append(src, n);
  }
  d->response->body_bytes += n;
  return n;
}

size_t WriteHeader(char* src, size_t size, size_t count, void* user) {
  auto* response = static_cast<HttpResponse*>(user);
  const absl::string_view line(src, size * count);
  // A new status line (after a 100 Continue, or a redirect) starts afresh.
  // Only a real status line ("HTTP/1.1 200 OK", "HTTP/2 206"): a header a
  // server names "HTTP/x" must not change where the body goes.
  if (absl::StartsWith(line, "HTTP/")) {
    const size_t space = line.find(' ');
    long status = 0;
    const bool version_ok =
        space != absl::string_view::npos && space >= 6 && space <= 8 &&
        line.substr(5, space - 5).find_first_not_of("0123456789.") == absl::string_view::npos;
    if (version_ok && line.size() >= space + 4 &&
        line.substr(space + 1, 3).find_first_not_of("0123456789") == absl::string_view::npos &&
        absl::SimpleAtoi(line.substr(space + 1, 3), &status)) {
      response->headers.clear();
      response->status = status;
      return line.size();
    }
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos || response->headers.size() >= 256) return line.size();
  response->headers.emplace_back(
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, colon))),
      std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  return line.size();
}

}  // namespace

std::string HttpResponse::Header(absl::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return "";
}

absl::StatusOr<HttpResponse> PerformHttp(const HttpRequest& request) {
  CURL* curl = ThreadHandle();
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  HttpResponse response;
  Upload upload{request.body};
  Download download{&request, &response};
  for (const SinkPiece& p : request.sink) download.sink_capacity += p.length;

  std::unique_ptr<curl_slist, SlistDeleter> headers;
  for (const auto& [name, value] : request.headers) {
    headers.reset(curl_slist_append(headers.release(), absl::StrCat(name, ": ", value).c_str()));
  }
  // curl adds "Expect: 100-continue" to large uploads and waits for it; S3
  // servers answer at once, so the wait is only latency.
  headers.reset(curl_slist_append(headers.release(), "Expect:"));

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, WriteHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &download);
  curl_easy_setopt(
      curl, CURLOPT_TIMEOUT_MS,
      static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(request.timeout))));
  curl_easy_setopt(
      curl, CURLOPT_CONNECTTIMEOUT_MS,
      static_cast<long>(std::max<int64_t>(
          1, absl::ToInt64Milliseconds(std::min(request.timeout, absl::Seconds(10))))));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(
      curl, CURLOPT_LOW_SPEED_TIME,
      static_cast<long>(std::max<int64_t>(1, absl::ToInt64Seconds(request.stall_timeout))));
  curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  if (!request.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, request.ca_file.c_str());

  if (request.method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &upload);
    curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(curl, CURLOPT_SEEKDATA, &upload);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  } else if (request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }

  const CURLcode code = curl_easy_perform(curl);
  if (download.overflow) {
    return absl::ResourceExhaustedError(absl::StrCat(
        request.method, " ", request.url, ": the response body is longer than the ",
        request.sink.empty() ? request.max_body : download.sink_capacity, " bytes expected"));
  }
  if (code != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(request.method, " ", request.url, ": ", curl_easy_strerror(code)));
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

}  // namespace ckpt::storage::s3
