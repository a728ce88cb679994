// ckptd on an s3:// storage root against a real S3 server (Swift's s3api,
// tests/support/s3_server.h), with no shared directory: saves, loads under
// another sharding (every byte checked by the ranks), ckptctl list, verify
// and gc; and ckptd SIGKILLed at random instants of a save, after which no
// step is visible without every object, and a restart leaves no unfinished
// upload and no files outside a committed step.
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/s3/s3_client.h"
#include "daemon/storage/step_location.h"
#include "tests/catch.h"
#include "tests/support/http_get.h"
#include "tests/support/s3_server.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

// A bucket for one daemon, and the flags that put its root there.
struct S3Root {
  std::string bucket;
  std::vector<std::string> flags;
  storage::s3::S3Client client{TestS3ClientOptions()};

  explicit S3Root(const TestDaemon& d, const std::string& tag) : bucket(NewTestBucket(tag)) {
    const std::string credentials = d.dir() + "/s3-credentials";
    {
      std::ofstream out(credentials);
      out << "[default]\naws_access_key_id = " << SharedS3Server().access_key
          << "\naws_secret_access_key = " << SharedS3Server().secret_key << "\n";
    }
    REQUIRE(chmod(credentials.c_str(), 0600) == 0);
    flags = {"--storage_root=s3://" + bucket + "/root",
             "--s3_endpoint=" + SharedS3Server().endpoint, "--s3_credentials_file=" + credentials,
             "--s3_part_bytes=5242880", "--s3_request_deadline_s=30"};
  }

  std::vector<std::string> Keys() {
    absl::StatusOr<storage::s3::Listing> listing = client.List(bucket, "", "");
    REQUIRE(listing.ok());
    std::vector<std::string> keys;
    for (const auto& o : listing->objects) keys.push_back(o.key);
    return keys;
  }
  size_t Uploads() {
    auto uploads = client.ListMultipartUploads(bucket, "");
    REQUIRE(uploads.ok());
    return uploads->size();
  }
  // The partial directories COMMIT objects name, by step.
  std::map<int64_t, std::string> Committed(const std::string& job) {
    std::map<int64_t, std::string> out;
    for (const std::string& key : Keys()) {
      const std::vector<std::string> parts = absl::StrSplit(key, '/');
      if (parts.size() != 4 || parts[1] != job || parts[3] != storage::kCommitName) continue;
      const std::optional<int64_t> step = storage::ParseStepDirName(parts[2]);
      REQUIRE(step.has_value());
      absl::StatusOr<std::string> contents = client.GetObject(bucket, key, 4096);
      REQUIRE(contents.ok());
      const std::optional<storage::CommitRecord> record =
          storage::ParseCommitRecord(*contents, *step);
      REQUIRE(record.has_value());
      out[*step] = record->dir;
    }
    return out;
  }
};

void RequireAllOk(const std::vector<ExitInfo>& ranks) {
  for (const ExitInfo& r : ranks) {
    INFO(r.output);
    REQUIRE(r.ok());
  }
}

TEST_CASE("ckptd on S3: save, resharded load, list, verify and gc", "[s3]") {
  TestDaemon d;
  S3Root s3(d, "daemon");
  std::string metrics;
  for (int attempt = 0; attempt < 5 && metrics.empty(); ++attempt) {
    const std::string address = absl::StrCat("127.0.0.1:", FreeTcpPort());
    std::vector<std::string> flags = s3.flags;
    flags.push_back("--metrics_address=" + address);
    // Manifests written split (a root and chunk tables, docs/manifest.md):
    // the loads, verify, export and gc below read them from the bucket.
    flags.push_back("--manifest_split_min_chunks=1");
    if (d.Start(flags).ok()) metrics = address;
  }
  REQUIRE_FALSE(metrics.empty());
  for (int64_t step = 1; step <= 3; ++step) RequireAllOk(d.RunRanks("job", "save", 2, step, 8));
  // The requests are counted, and at least the state went up.
  absl::StatusOr<HttpReply> scrape = HttpGet(metrics, "/metrics");
  REQUIRE(scrape.ok());
  const std::string sent_prefix =
      "ckpt_storage_transfer_bytes_total{backend=\"s3\",direction=\"sent\"} ";
  const size_t at = scrape->body.find(sent_prefix);
  INFO(scrape->body);
  REQUIRE(at != std::string::npos);
  const double sent = std::stod(scrape->body.substr(at + sent_prefix.size()));
  CHECK(sent > 3 * 8 * 1.4e6);  // three steps of a scale-8 model (~11 MiB each)
  CHECK(absl::StrContains(scrape->body, "ckpt_storage_requests_total{backend=\"s3\"}"));
  // Three ranks load what two saved: every byte checked by each rank.
  for (const ExitInfo& r : d.RunRanks("job", "load", 3, -1, 8, 2)) {
    INFO(r.output);
    REQUIRE(r.ok());
    CHECK(absl::StrContains(r.output, "loaded step 3:"));
  }
  // Nothing lives on the local disk: the root is the bucket.
  CHECK_FALSE(std::ifstream(d.root() + "/job/LATEST").good());
  const std::map<int64_t, std::string> committed = s3.Committed("job");
  REQUIRE(committed.size() == 3);

  ExitInfo list = d.Ckptctl({"list", "job"});
  INFO(list.output);
  REQUIRE(list.ok());
  CHECK(absl::StrContains(list.output, "latest"));
  ExitInfo verify = d.Ckptctl({"verify", "job", "2"});
  INFO(verify.output);
  REQUIRE(verify.ok());
  CHECK(absl::StrContains(verify.output, "OK"));

  // ckptctl export reads the bucket itself: the same safetensors as the
  // same step saved to a directory (there with a manifest of one file).
  {
    TestDaemon local;
    REQUIRE(local.Start().ok());
    RequireAllOk(local.RunRanks("job", "save", 2, 3, 8));
    const std::string from_s3 = d.dir() + "/export-s3", from_disk = d.dir() + "/export-disk";
    std::vector<std::string> s3_export = {"export",
                                          "job",
                                          "3",
                                          "--out",
                                          from_s3,
                                          "--storage-root",
                                          "s3://" + s3.bucket + "/root",
                                          "--s3-endpoint",
                                          SharedS3Server().endpoint,
                                          "--s3-credentials-file",
                                          d.dir() + "/s3-credentials"};
    ExitInfo exported = d.Ckptctl(s3_export);
    INFO(exported.output);
    REQUIRE(exported.ok());
    ExitInfo local_export =
        local.Ckptctl({"export", "job", "3", "--out", from_disk, "--storage-root", local.root()});
    INFO(local_export.output);
    REQUIRE(local_export.ok());
    ExitInfo same = RunCommand({"/usr/bin/diff", "-r", from_s3, from_disk});
    INFO(same.output);
    CHECK(same.ok());
  }

  // Another process (a load on another host, an export) pins step 1: its
  // lease, unexpired, keeps gc off it.
  const std::string lease =
      absl::StrCat("root/job/step-1/", storage::kCommitName, ".leases/s.0f0e1d.",
                   absl::ToUnixMillis(absl::Now() + absl::Seconds(60)));
  REQUIRE(s3.client.PutObject(s3.bucket, lease, "").ok());
  ExitInfo pinned = d.Ckptctl({"gc", "job", "--keep-last", "1", "--grace-s", "0"});
  INFO(pinned.output);
  REQUIRE(pinned.ok());
  CHECK(absl::StrContains(pinned.output, "in use"));
  CHECK(s3.Committed("job").size() == 2);
  REQUIRE(s3.client.DeleteObject(s3.bucket, lease).ok());

  ExitInfo gc = d.Ckptctl({"gc", "job", "--keep-last", "1", "--grace-s", "0"});
  INFO(gc.output);
  REQUIRE(gc.ok());
  // Steps 1 and 2 are gone, COMMIT and files; step 3 is whole.
  const std::vector<std::string> keys = s3.Keys();
  for (int64_t gone : {1, 2}) {
    for (const std::string& key : keys) {
      CHECK_FALSE(absl::StrContains(key, committed.at(gone)));
      CHECK_FALSE(absl::StrContains(key, absl::StrCat("/step-", gone, "/")));
    }
  }
  CHECK(s3.Committed("job").size() == 1);
  CHECK(s3.Uploads() == 0);
  RequireAllOk(d.RunRanks("job", "load", 2, 3, 8, 2));
  // A step that was deleted is NOT_FOUND, not a crash or a half load.
  for (const ExitInfo& r : d.RunRanks("job", "load", 1, 1, 8, 2)) CHECK_FALSE(r.ok());
}

TEST_CASE("ckptd on S3 with a memory tier: the background copy commits into the bucket", "[s3]") {
  TestDaemon d;
  S3Root s3(d, "tier");
  std::vector<std::string> flags = s3.flags;
  flags.push_back(absl::StrCat("--memory_tier_bytes=", 16 << 20));
  REQUIRE(d.Start(flags).ok());
  // Saved to memory; the durable copy is the tier's, in the background.
  RequireAllOk(d.RunRanks("tiered", "save", 2, 5, 1, 0, {"--tier=both"}));
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 1; }));
  CHECK(d.Status().memory_persist_failures() == 0);
  const std::map<int64_t, std::string> committed = s3.Committed("tiered");
  REQUIRE(committed.size() == 1);
  CHECK(committed.begin()->first == 5);
  CHECK(s3.Uploads() == 0);
  ExitInfo verify = d.Ckptctl({"verify", "tiered", "5"});
  INFO(verify.output);
  CHECK(verify.ok());
  // Restarted, the memory is gone: three ranks load the bucket's copy.
  d.Kill();
  REQUIRE(d.Start(s3.flags).ok());
  for (const ExitInfo& r : d.RunRanks("tiered", "load", 3, 5, 1, 2)) {
    INFO(r.output);
    CHECK(r.ok());  // every byte compared against the pattern the save wrote
    CHECK(absl::StrContains(r.output, "tiers=durable"));
  }
}

TEST_CASE("ckptd on S3 killed at random instants of a save: no half step, nothing left behind",
          "[s3]") {
  TestDaemon d;
  S3Root s3(d, "kill");
  std::mt19937 random(std::random_device{}());
  std::set<int64_t> saved;
  for (int64_t step = 1; step <= 4; ++step) {
    REQUIRE(d.Start(s3.flags).ok());
    std::vector<std::unique_ptr<Subprocess>> ranks;
    for (int r = 0; r < 2; ++r) ranks.push_back(d.StartRank("job", "save", r, 2, step, 1, 40));
    const int delay_ms = std::uniform_int_distribution<int>(0, 1500)(random);
    INFO("step " << step << ": SIGKILL after " << delay_ms << " ms");
    // Not a synchronisation: the instant of the kill is what is random.
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    d.Kill();
    for (auto& rank : ranks) rank->Wait();

    // Restarted, it removes what its killed instance left.
    REQUIRE(d.Start(s3.flags).ok());
    const std::map<int64_t, std::string> committed = s3.Committed("job");
    for (const auto& [s, dir] : committed) saved.insert(s);
    // Every visible step is whole: ckptd verifies every chunk's CRC.
    for (const auto& [s, dir] : committed) {
      ExitInfo verify = d.Ckptctl({"verify", "job", std::to_string(s)});
      INFO(verify.output);
      CHECK(verify.ok());
    }
    // No file outside a committed step's directory, and no upload left.
    std::set<std::string> dirs;
    for (const auto& [s, dir] : committed) dirs.insert(dir);
    for (const std::string& key : s3.Keys()) {
      const std::vector<std::string> parts = absl::StrSplit(key, '/');
      REQUIRE(parts.size() >= 3);
      if (!storage::IsPartialDirName(parts[2])) continue;
      INFO(key);
      CHECK(dirs.count(parts[2]) == 1);
    }
    CHECK(s3.Uploads() == 0);
    d.Kill();
  }
  WARN("steps committed before their daemon was killed: " << saved.size() << " of 4");
  // What was committed loads, bit-exact, after all that.
  if (!saved.empty()) {
    REQUIRE(d.Start(s3.flags).ok());
    for (const ExitInfo& r : d.RunRanks("job", "load", 1, *saved.rbegin(), 40, 2)) {
      INFO(r.output);
      CHECK(r.ok());
    }
  }
}

}  // namespace
}  // namespace ckpt::testing
