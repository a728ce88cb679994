// What one host holding the cluster token can make the coordinator's
// gathering of durable copies (daemon/tier/spread_persist.h) do: it cannot
// start copies without bound (each holds a thread, a manifest and a partial
// directory until the deadline), nor have its manifest committed for a save
// whose other hosts sent another.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/tier/spread_persist.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::tier {
namespace {

constexpr char kRoot[] = "/ckpt";

// Step `step` of "job", saved by `hosts` hosts named <prefix>0, <prefix>1...:
// one object in each host's file.
v1::CheckpointManifest Manifest(int64_t step, int hosts = 2, const std::string& prefix = "h") {
  v1::CheckpointManifest m;
  m.set_format_version(1);
  m.set_job("job");
  m.set_step(step);
  m.set_created_unix_ms(1234);
  for (int h = 0; h < hosts; ++h) {
    m.mutable_topology()->add_hosts()->set_host(absl::StrCat(prefix, h));
    v1::ObjectEntry* o = m.add_objects();
    o->set_key("state");
    o->set_rank(h);
    o->mutable_chunk()->set_file(absl::StrCat("data/", prefix, h, "-0.bin"));
    o->mutable_chunk()->set_length(5);
    o->mutable_chunk()->set_crc32c(7);
  }
  return m;
}

v1::SpreadPersistOpen OpenBy(const std::string& host, const v1::CheckpointManifest& manifest) {
  v1::SpreadPersistOpen open;
  open.mutable_host()->set_host(host);
  open.set_manifest(manifest.SerializeAsString());
  return open;
}

struct Fixture {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  coordinator::Coordinator durable{*backend, kRoot, planning::SavePlannerOptions{}};
  // Every host is live: nothing fails the copies but the deadline.
  SpreadPersists persists{durable, {.deadline = absl::Minutes(5), .host_live = nullptr}};
};

TEST_CASE("one host cannot start durable copies without bound", "[spread_persist]") {
  Fixture f;
  const int64_t bound = static_cast<int64_t>(SpreadPersists::kMaxStartedPerHost);
  for (int64_t step = 1; step <= bound; ++step) {
    CKPT_REQUIRE_OK(f.persists.Open(OpenBy("h0", Manifest(step))).status());
  }
  CKPT_REQUIRE_ERROR(f.persists.Open(OpenBy("h0", Manifest(bound + 1))).status(),
                     absl::StatusCode::kResourceExhausted, "started by host h0");
  // The copies it started still take the other host, and another host's.
  CKPT_REQUIRE_OK(f.persists.Open(OpenBy("h1", Manifest(1))).status());
  CKPT_REQUIRE_OK(f.persists.Open(OpenBy("h1", Manifest(bound + 1))).status());
  CHECK(f.persists.counts().in_flight == static_cast<uint64_t>(bound + 1));
  f.persists.Stop();
}

TEST_CASE("copies in flight are bounded over all hosts", "[spread_persist]") {
  Fixture f;
  const size_t hosts = SpreadPersists::kMaxInFlight / SpreadPersists::kMaxStartedPerHost;
  int64_t step = 0;
  for (size_t h = 0; h < hosts; ++h) {
    for (size_t i = 0; i < SpreadPersists::kMaxStartedPerHost; ++i) {
      CKPT_REQUIRE_OK(
          f.persists.Open(OpenBy(absl::StrCat("h", h), Manifest(++step, hosts))).status());
    }
  }
  CKPT_REQUIRE_ERROR(f.persists.Open(OpenBy("x0", Manifest(++step, 1, "x"))).status(),
                     absl::StatusCode::kResourceExhausted,
                     absl::StrCat("in flight: ", SpreadPersists::kMaxInFlight));
  f.persists.Stop();
}

TEST_CASE("a host whose manifest is unlike the first host's fails the copy", "[spread_persist]") {
  Fixture f;
  CKPT_REQUIRE_OK(f.persists.Open(OpenBy("h0", Manifest(5))).status());
  // The same save (job, step, time), other bytes: the CRC h1 would commit.
  v1::CheckpointManifest forged = Manifest(5);
  forged.mutable_objects(1)->mutable_chunk()->set_crc32c(8);
  CKPT_REQUIRE_ERROR(f.persists.Open(OpenBy("h1", forged)).status(), absl::StatusCode::kAborted,
                     "host h1 sent a manifest of step 5 of job job unlike the one host h0 sent");
  // The copy failed for every host: h0 asking again learns it.
  CKPT_REQUIRE_ERROR(f.persists.Open(OpenBy("h0", Manifest(5))).status(),
                     absl::StatusCode::kAborted, "unlike the one host h0 sent");
  f.persists.Stop();  // waits for the copy's thread
  CHECK(f.persists.counts().failed == 1);
  CHECK(f.persists.counts().committed == 0);
}

}  // namespace
}  // namespace ckpt::tier
