// The S3 backend against a real server (Swift's s3api), beyond the
// conformance suite: multipart uploads straight from memory and copied,
// parts that grow when the server allows few, uploads that must not be left
// behind, an independent client (boto3) reading ckpt's objects and writing
// ones ckpt reads, and a fault-injecting proxy (tools/dev/s3-fault-proxy.py)
// adding SlowDown, connection resets mid-part and stalls.
#include <signal.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/storage/s3/s3_backend.h"
#include "tests/catch.h"
#include "tests/support/s3_server.h"
#include "tests/support/subprocess.h"
#include "tests/unit/daemon/storage/test_util.h"

namespace ckpt::storage::s3 {
namespace {

using ckpt::testing::ExitInfo;
using ckpt::testing::RunCommand;
using ckpt::testing::SourcePath;
using ckpt::testing::Subprocess;
using testing::AlignedBuffer;
using testing::Pattern;

constexpr size_t kMiB = 1 << 20;

std::unique_ptr<S3Backend> Backend(S3BackendOptions options) {
  auto backend = NewS3Backend(std::move(options));
  CKPT_REQUIRE_OK(backend);
  return std::move(*backend);
}

S3BackendOptions Options(const std::string& bucket) {
  S3BackendOptions options;
  options.client = ckpt::testing::TestS3ClientOptions();
  options.bucket = bucket;
  options.part_bytes = 5 * kMiB;
  return options;
}

std::string ReadAll(storage::Backend& backend, const std::string& path) {
  absl::StatusOr<std::string> contents = ReadWholeFile(backend, path);
  CKPT_REQUIRE_OK(contents);
  return *contents;
}

// Runs boto3 (from .venv) against the shared server: `code` sees s3, a
// client, and prints its answer.
ExitInfo Boto3(const std::string& code) {
  const ckpt::testing::S3TestServer& server = ckpt::testing::SharedS3Server();
  const std::string program = absl::StrCat(
      "import boto3, hashlib, sys\n"
      "from boto3.s3.transfer import TransferConfig\n"
      "from botocore.config import Config\n"
      "s3 = boto3.client('s3', endpoint_url='",
      server.endpoint, "', aws_access_key_id='", server.access_key, "', aws_secret_access_key='",
      server.secret_key,
      "', region_name='us-east-1', config=Config(s3={'addressing_style': 'path'}))\n", code);
  return RunCommand({SourcePath(".venv/bin/python"), "-c", program});
}

std::string Sha256(const std::string& bytes) { return Sha256Hex(bytes); }

// Compares without printing megabytes of bytes on a failure.
void RequireSameBytes(const std::string& got, const std::string& want) {
  REQUIRE(got.size() == want.size());
  size_t first_diff = 0;
  while (first_diff < got.size() && got[first_diff] == want[first_diff]) ++first_diff;
  INFO("first differing byte: " << first_diff);
  REQUIRE(first_diff == got.size());
}

TEST_CASE("S3: parts from memory and copied round trip, and boto3 reads the same bytes", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("parts");
  auto backend = Backend(Options(bucket));
  const std::string path = absl::StrCat("s3://", bucket, "/job/data/h-0.bin");
  // Parts 1-3 whole from one aligned buffer (no copy); part 4 from two
  // unaligned writes (copied); a short last part.
  const size_t size = 17 * kMiB + 12345;
  const std::string data = Pattern(size, 3);
  AlignedBuffer buffer(size);
  std::memcpy(buffer.data(), data.data(), size);
  {
    auto file = backend->NewWritableFile(path);
    CKPT_REQUIRE_OK(file);
    CKPT_REQUIRE_OK((*file)->WriteAt(0, buffer.data(), 15 * kMiB));
    CKPT_REQUIRE_OK((*file)->WriteAt(16 * kMiB, buffer.data() + 16 * kMiB, size - 16 * kMiB));
    CKPT_REQUIRE_OK((*file)->WriteAt(15 * kMiB, buffer.data() + 15 * kMiB, kMiB));
    // Bytes already sent cannot change: an object store takes each part once.
    CHECK((*file)->WriteAt(kMiB, "x", 1).code() == absl::StatusCode::kFailedPrecondition);
    CKPT_REQUIRE_OK((*file)->Sync());
    CKPT_REQUIRE_OK((*file)->Close());
  }
  RequireSameBytes(ReadAll(*backend, path), data);
  const ExitInfo boto = Boto3(absl::StrCat("b = s3.get_object(Bucket='", bucket,
                                           "', Key='job/data/h-0.bin')['Body'].read()\n"
                                           "print(len(b), hashlib.sha256(b).hexdigest())\n"));
  INFO(boto.output);
  REQUIRE(boto.ok());
  CHECK(boto.output == absl::StrCat(size, " ", Sha256(data), "\n"));
  // Nothing is left half-uploaded.
  auto uploads = backend->client().ListMultipartUploads(bucket, "");
  CKPT_REQUIRE_OK(uploads);
  CHECK(uploads->empty());
}

TEST_CASE("S3: an object boto3 uploaded in parts is read by ckpt", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("boto");
  const size_t size = 13 * kMiB + 7;
  const ExitInfo boto =
      Boto3(absl::StrCat("import random\n"
                         "data = random.Random(5).randbytes(",
                         size,
                         ")\n"
                         "open('/tmp/ckpt-boto-upload', 'wb').write(data)\n"
                         "s3.upload_file('/tmp/ckpt-boto-upload', '",
                         bucket,
                         "', 'in/x.bin', Config=TransferConfig("
                         "multipart_threshold=5 << 20, multipart_chunksize=5 << 20))\n"
                         "print(hashlib.sha256(data).hexdigest())\n"));
  INFO(boto.output);
  REQUIRE(boto.ok());
  auto backend = Backend(Options(bucket));
  const std::string path = absl::StrCat("s3://", bucket, "/in/x.bin");
  const std::string read = ReadAll(*backend, path);
  REQUIRE(read.size() == size);
  CHECK(Sha256(read) + "\n" == boto.output);
  std::remove("/tmp/ckpt-boto-upload");
  // Ranged reads in parallel, across part boundaries.
  auto file = backend->NewReadableFile(path);
  CKPT_REQUIRE_OK(file);
  std::string a(6 * kMiB, '\0'), b(100, '\0');
  std::vector<IoOp> ops = {{4 * kMiB, a.data(), a.size()}, {size - 100, b.data(), 100}};
  CKPT_REQUIRE_OK((*file)->ReadBatch(ops));
  CHECK(a == read.substr(4 * kMiB, a.size()));
  CHECK(b == read.substr(size - 100));
}

TEST_CASE("S3: where the server allows few parts, later parts grow", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("grow");
  S3BackendOptions options = Options(bucket);
  options.max_parts = 16;  // one part per group: 5, 10, 20, 40 MiB...
  auto backend = Backend(options);
  const std::string path = absl::StrCat("s3://", bucket, "/big.bin");
  const size_t size = 80 * kMiB;  // five parts: 5 + 10 + 20 + 40 + 5
  const std::string data = Pattern(size, 9);
  {
    auto file = backend->NewWritableFile(path);
    CKPT_REQUIRE_OK(file);
    for (size_t at = 0; at < size; at += 3 * kMiB) {
      const size_t n = std::min(3 * kMiB, size - at);
      CKPT_REQUIRE_OK((*file)->WriteAt(at, data.data() + at, n));
    }
    CKPT_REQUIRE_OK((*file)->Close());
  }
  RequireSameBytes(ReadAll(*backend, path), data);
  // Past what 16 growing parts hold (up to S3's 5 GiB a part): refused,
  // before anything is sent.
  auto file = backend->NewWritableFile(absl::StrCat(path, ".2"));
  CKPT_REQUIRE_OK(file);
  const absl::Status far = (*file)->WriteAt(uint64_t{1} << 40, "x", 1);
  CHECK(far.code() == absl::StatusCode::kOutOfRange);
}

TEST_CASE("S3: a file dropped before Sync leaves no object and no upload", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("drop");
  auto backend = Backend(Options(bucket));
  const std::string path = absl::StrCat("s3://", bucket, "/partial.bin");
  const std::string data = Pattern(12 * kMiB, 4);
  {
    auto file = backend->NewWritableFile(path);
    CKPT_REQUIRE_OK(file);
    CKPT_REQUIRE_OK((*file)->WriteAt(0, data.data(), data.size()));  // two parts sent
    auto uploads = backend->client().ListMultipartUploads(bucket, "");
    CKPT_REQUIRE_OK(uploads);
    REQUIRE(uploads->size() == 1);
    CHECK((*uploads)[0].key == "partial.bin");
  }
  auto exists = backend->Exists(path);
  CKPT_REQUIRE_OK(exists);
  CHECK_FALSE(*exists);
  auto uploads = backend->client().ListMultipartUploads(bucket, "");
  CKPT_REQUIRE_OK(uploads);
  CHECK(uploads->empty());
}

TEST_CASE("S3: listings of more than one page are whole", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("list");
  auto backend = Backend(Options(bucket));
  constexpr int kFiles = 1003;  // Swift and S3 send 1,000 keys a page
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kFiles; i += 8) {
        absl::Status s = backend->client().PutObject(bucket, absl::StrCat("dir/f", 10000 + i), "x");
        if (!s.ok()) results[t] = s;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) CKPT_REQUIRE_OK(s);
  auto names = backend->ListDir(absl::StrCat("s3://", bucket, "/dir"));
  CKPT_REQUIRE_OK(names);
  REQUIRE(names->size() == kFiles);
  CHECK(names->front() == "f10000");
  CHECK(names->back() == absl::StrCat("f", 10000 + kFiles - 1));
  CKPT_REQUIRE_OK(backend->RemoveAll(absl::StrCat("s3://", bucket, "/dir")));
  auto after = backend->ListDir(absl::StrCat("s3://", bucket, "/dir"));
  CKPT_REQUIRE_OK(after);
  CHECK(after->empty());
}

// The fault proxy in front of the shared server.
struct FaultProxy {
  std::unique_ptr<Subprocess> process;
  std::string endpoint;
  std::string stats_path;

  explicit FaultProxy(const std::vector<std::string>& faults) {
    stats_path =
        absl::StrCat("/tmp/ckpt-s3-proxy-", getpid(), "-", reinterpret_cast<uintptr_t>(this));
    std::vector<std::string> argv = {SourcePath(".venv/bin/python"),
                                     SourcePath("tools/dev/s3-fault-proxy.py"),
                                     "--upstream",
                                     ckpt::testing::SharedS3Server().endpoint,
                                     "--stats",
                                     stats_path};
    argv.insert(argv.end(), faults.begin(), faults.end());
    ckpt::testing::LocalServer server = ckpt::testing::StartLocalServer(argv);
    process = std::move(server.process);
    endpoint = server.endpoint;
  }
  ~FaultProxy() { std::remove(stats_path.c_str()); }

  // A count from the proxy's stats file.
  int Count(const std::string& what) const {
    std::ifstream in(stats_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"" + what + "\": ");
    if (at == std::string::npos) return -1;
    int n = -1;
    (void)absl::SimpleAtoi(
        text.substr(at + what.size() + 4, text.find_first_of(",}", at) - at - what.size() - 4), &n);
    return n;
  }
};

TEST_CASE("S3: SlowDown, resets mid-part and stalls are retried; the bytes are exact", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("faults");
  FaultProxy proxy({"--slowdown-every", "3", "--reset-every", "5", "--stall-every", "11",
                    "--stall-seconds", "4"});
  S3BackendOptions options = Options(bucket);
  options.client.endpoint = proxy.endpoint;
  options.client.stall_timeout = absl::Seconds(1);
  options.client.retry.base_delay = absl::Milliseconds(10);
  options.client.retry.deadline = absl::Seconds(60);
  options.max_parts = 1000;  // the probe would also meet the faults: fine, but slower
  auto backend = Backend(options);
  const std::string path = absl::StrCat("s3://", bucket, "/f.bin");
  const std::string data = Pattern(31 * kMiB + 3, 21);
  {
    auto file = backend->NewWritableFile(path);
    CKPT_REQUIRE_OK(file);
    CKPT_REQUIRE_OK((*file)->WriteAt(0, data.data(), data.size()));
    CKPT_REQUIRE_OK((*file)->Close());
  }
  RequireSameBytes(ReadAll(*backend, path), data);
  const S3Stats& stats = backend->client().stats();
  CHECK(stats.retries.load() > 0);
  CHECK(stats.throttles.load() > 0);
  CHECK(stats.failures.load() == 0);
  CHECK(proxy.Count("slowdowns") > 0);
  CHECK(proxy.Count("resets") > 0);
  CHECK(proxy.Count("stalls") > 0);
}

TEST_CASE("S3: with the server frozen, a write fails within its deadline, naming key and upload",
          "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("frozen");
  FaultProxy proxy({});
  S3BackendOptions options = Options(bucket);
  options.client.endpoint = proxy.endpoint;
  options.client.stall_timeout = absl::Seconds(1);
  options.client.attempt_timeout = absl::Seconds(2);
  options.client.retry.deadline = absl::Seconds(4);
  options.max_parts = 1000;
  auto backend = Backend(options);
  const std::string path = absl::StrCat("s3://", bucket, "/frozen.bin");
  const std::string data = Pattern(11 * kMiB, 8);
  auto file = backend->NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, data.data(), 5 * kMiB));  // the upload exists
  auto uploads = backend->client().ListMultipartUploads(bucket, "");
  CKPT_REQUIRE_OK(uploads);
  REQUIRE(uploads->size() == 1);
  proxy.process->Signal(SIGSTOP);
  const absl::Time start = absl::Now();
  absl::Status s = (*file)->WriteAt(5 * kMiB, data.data() + 5 * kMiB, 6 * kMiB);
  if (s.ok()) s = (*file)->Sync();
  const absl::Duration took = absl::Now() - start;
  proxy.process->Signal(SIGCONT);
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(std::string(s.message()), Catch::Contains("frozen.bin"));
  CHECK_THAT(std::string(s.message()), Catch::Contains((*uploads)[0].upload_id));
  // Each request gives up at its deadline; the write had two (a part, then
  // the rest at Sync), so it ends well within three.
  CHECK(took < absl::Seconds(3 * 4));
  file->reset();  // aborts the upload, now that the server answers again
  auto left = backend->client().ListMultipartUploads(bucket, "");
  CKPT_REQUIRE_OK(left);
  CHECK(left->empty());
  auto exists = backend->Exists(path);
  CKPT_REQUIRE_OK(exists);
  CHECK_FALSE(*exists);
}

}  // namespace
}  // namespace ckpt::storage::s3
