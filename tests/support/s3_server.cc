#include "tests/support/s3_server.h"

#include <stdio.h>
#include <stdlib.h>

#include <cstdlib>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "tests/catch.h"

namespace ckpt::testing {
namespace {

std::string Script() { return absl::StrCat(CKPT_SOURCE_DIR, "/tools/dev/s3-server.sh"); }

S3TestServer* started = nullptr;

void StopAtExit() {
  if (started == nullptr) return;
  const std::string command = absl::StrCat(Script(), " stop ", started->dir, " >/dev/null 2>&1");
  (void)std::system(command.c_str());
  (void)std::system(absl::StrCat("rm -rf ", started->dir).c_str());
}

std::string RandomHex() {
  std::random_device device;
  return absl::StrFormat("%08x", device());
}

}  // namespace

LocalServer StartLocalServer(const std::vector<std::string>& argv) {
  LocalServer server;
  absl::StatusOr<std::unique_ptr<Subprocess>> started = Subprocess::Start(argv);
  INFO(started.status().ToString());
  REQUIRE(started.ok());
  server.process = std::move(*started);
  REQUIRE(server.process->WaitForOutput("\n", absl::Seconds(30)));
  const std::string out = server.process->Output();
  const size_t at = out.find("port=");
  INFO(out);
  REQUIRE(at != std::string::npos);
  server.endpoint =
      absl::StrCat("http://127.0.0.1:", out.substr(at + 5, out.find('\n', at) - at - 5));
  return server;
}

std::string SourcePath(const std::string& relative) {
  return absl::StrCat(CKPT_SOURCE_DIR, "/", relative);
}

const S3TestServer& SharedS3Server() {
  static S3TestServer* server = [] {
    auto* s = new S3TestServer;
    char dir[] = "/tmp/ckpt-s3-XXXXXX";
    REQUIRE(mkdtemp(dir) != nullptr);
    s->dir = dir;
    const std::string command = absl::StrCat(Script(), " start ", s->dir, " 2>&1");
    FILE* out = popen(command.c_str(), "r");
    REQUIRE(out != nullptr);
    std::string text;
    char buf[512];
    while (fgets(buf, sizeof buf, out) != nullptr) text += buf;
    const int rc = pclose(out);
    INFO("tools/dev/s3-server.sh start: " << text);
    REQUIRE(rc == 0);
    const size_t at = text.find("endpoint=");
    REQUIRE(at != std::string::npos);
    s->endpoint = std::string(absl::StripAsciiWhitespace(text.substr(at + 9)));
    started = s;
    std::atexit(StopAtExit);
    return s;
  }();
  return *server;
}

storage::s3::S3ClientOptions TestS3ClientOptions() {
  const S3TestServer& server = SharedS3Server();
  storage::s3::S3ClientOptions options;
  options.endpoint = server.endpoint;
  options.credentials.access_key_id = server.access_key;
  options.credentials.secret_access_key = server.secret_key;
  options.retry.deadline = absl::Seconds(30);
  return options;
}

std::string NewTestBucket(const std::string& tag) {
  const std::string bucket = absl::StrCat("ckpt-", tag, "-", RandomHex());
  storage::s3::S3Client client(TestS3ClientOptions());
  const absl::Status s = client.CreateBucket(bucket);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return bucket;
}

std::unique_ptr<storage::s3::S3Backend> NewTestS3Backend(const std::string& tag) {
  storage::s3::S3BackendOptions options;
  options.client = TestS3ClientOptions();
  options.bucket = NewTestBucket(tag);
  auto backend = storage::s3::NewS3Backend(options);
  INFO(backend.status().ToString());
  REQUIRE(backend.ok());
  return std::move(*backend);
}

}  // namespace ckpt::testing
