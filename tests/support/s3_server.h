// A real S3 server for the tests: Swift with its s3api middleware, started
// by tools/dev/s3-server.sh in a temporary directory the first time a test
// of this process asks for it, stopped when the process exits.
#ifndef CKPT_TESTS_SUPPORT_S3_SERVER_H_
#define CKPT_TESTS_SUPPORT_S3_SERVER_H_

#include <string>

#include "daemon/storage/s3/s3_backend.h"
#include "tests/support/subprocess.h"

namespace ckpt::testing {

struct S3TestServer {
  std::string endpoint;  // "http://127.0.0.1:<port>"
  std::string access_key = "ckpt:tester";
  std::string secret_key = "ckpt-secret";
  std::string dir;  // the server's files (tools/dev/s3-server.sh)
};

// Starts the server once per process (the test fails if it cannot).
const S3TestServer& SharedS3Server();

// Client options for the shared server, with short retry deadlines.
storage::s3::S3ClientOptions TestS3ClientOptions();

// A bucket of the shared server made for the caller: "ckpt-<tag>-<random>".
std::string NewTestBucket(const std::string& tag);

// A backend on a new bucket of the shared server.
std::unique_ptr<storage::s3::S3Backend> NewTestS3Backend(const std::string& tag);

// An HTTP server process that prints "port=<n>" once it listens on
// 127.0.0.1 (the fault proxy, the hostile server); the test fails if it
// does not within 30 s.
struct LocalServer {
  std::unique_ptr<Subprocess> process;
  std::string endpoint;  // "http://127.0.0.1:<n>"
};
LocalServer StartLocalServer(const std::vector<std::string>& argv);

// The repository's tools/dev/<name> and .venv's Python (boto3 is there).
std::string SourcePath(const std::string& relative);

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_S3_SERVER_H_
