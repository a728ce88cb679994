// The coordinator's rendezvous for a save spread over hosts: each host sends
// its plan from its own thread (as each node's RPC does); the last arrival
// plans them all, each host gets its own part; the last report commits.
// A bad plan, a lost host, an abort or ranks that never come fail the save
// on every host, remove its partial directory and leave the step free.
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/storage/backend_factory.h"
#include "proto/lib/crc32c.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

using namespace planning::testing;  // NOLINT
using storage::Backend;

constexpr char kRoot[] = "/ckpt";
constexpr uint64_t kChunk = 4096;

planning::SavePlannerOptions SmallChunks() {
  planning::SavePlannerOptions o;
  o.chunk_bytes = kChunk;
  return o;
}

// Host h0 holds ranks 0 and 1, h1 rank 2: "w" split in three row boxes,
// "b" replicated on every rank (written once, by one host).
v1::NodeSavePlan HostPlan(int host, int64_t step = 5) {
  const std::vector<int> ranks = host == 0 ? std::vector<int>{0, 1} : std::vector<int>{2};
  v1::NodeSavePlan node = Node(absl::StrCat("h", host), 3, 2, ranks, "job", step);
  for (int r : ranks) {
    AddShard(node, r, BoxShard("w", v1::FLOAT32, {96, 50}, {32 * r, 0}, {32, 50}));
    AddShard(node, r, Whole("b", v1::BFLOAT16, {3000}));
  }
  return node;
}

// What a node's writers do with its part: every item written, a CRC32C per
// chunk (an object is one chunk), files fsynced, all reported.
v1::NodePersistReport WriteOwnPart(storage::Backend& backend, const v1::SaveAssignment& a,
                                   v1::NodeSavePlan node) {
  REQUIRE(a.hosts_size() == 1);
  const v1::HostAssignment& part = a.hosts(0);
  v1::NodePersistReport report;
  *report.mutable_host() = node.host();
  report.set_save_id(a.save_id());
  std::map<std::string, std::string> files;
  for (const v1::WriteItem& item : part.items()) {
    const std::string bytes =
        PackedBytes(RankOf(node, item.rank()).shards(static_cast<int>(item.index())));
    const std::string& name = part.files(item.writer());
    std::string& file = files[name];
    if (file.size() < item.file_offset() + bytes.size()) {
      file.resize(item.file_offset() + bytes.size());
    }
    file.replace(item.file_offset(), bytes.size(), bytes);
    for (uint64_t off = 0; off < bytes.size(); off += kChunk) {
      v1::ChunkChecksum* sum = report.add_checksums();
      sum->set_file(name);
      sum->set_file_offset(item.file_offset() + off);
      sum->set_crc32c(Crc32c(bytes.data() + off, std::min<uint64_t>(kChunk, bytes.size() - off)));
    }
  }
  for (const auto& [name, contents] : files) {
    auto file = backend.NewWritableFile(absl::StrCat(kRoot, "/", a.partial_dir(), "/", name));
    CKPT_REQUIRE_OK(file);
    CKPT_REQUIRE_OK((*file)->WriteAt(0, contents.data(), contents.size()));
    CKPT_REQUIRE_OK((*file)->Sync());
    CKPT_REQUIRE_OK((*file)->Close());
    report.add_files(name);
  }
  return report;
}

bool StepExists(Coordinator& coord, int64_t step) {
  absl::StatusOr<bool> exists = coord.catalog().StepExists("job", step);
  CKPT_REQUIRE_OK(exists);
  return *exists;
}

bool NoPartials(storage::Backend& backend) {
  absl::StatusOr<std::vector<std::string>> names = backend.ListDir(absl::StrCat(kRoot, "/job"));
  if (!names.ok()) return true;
  for (const std::string& name : *names) {
    if (name.find(".partial-") != std::string::npos) return false;
  }
  return true;
}

// A waiting report fails with the save's error; one that comes after the
// failure is refused NOT_FOUND, quoting it. Either way the message says why.
void RequireReportFailed(const absl::StatusOr<v1::CommitResult>& result, const std::string& why) {
  INFO(result.status().ToString());
  REQUIRE(!result.ok());
  CHECK(result.status().message().find(why) != std::string::npos);
}

TEST_CASE("rendezvous: two hosts plan together, write their parts, commit once", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  auto h1 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(1)); });
  absl::StatusOr<v1::SaveAssignment> a0 = coord.PlanSave(HostPlan(0));
  absl::StatusOr<v1::SaveAssignment> a1 = h1.get();
  CKPT_REQUIRE_OK(a0);
  CKPT_REQUIRE_OK(a1);
  CHECK(a0->save_id() == a1->save_id());
  CHECK(a0->hosts(0).host().host() == "h0");
  CHECK(a1->hosts(0).host().host() == "h1");
  // A plan for many hosts is not sent to each of them.
  CHECK(a0->manifest_template().tensors_size() == 0);
  // "b" is written once in the cluster: three row boxes plus one replica.
  CHECK(a0->hosts(0).items_size() + a1->hosts(0).items_size() == 4);

  const v1::NodePersistReport r1 = WriteOwnPart(*backend, *a1, HostPlan(1));
  auto commit1 = std::async(std::launch::async, [&] { return coord.ReportPersisted(r1); });
  CHECK(!StepExists(coord, 5));  // h0 has not reported
  absl::StatusOr<v1::CommitResult> c0 =
      coord.ReportPersisted(WriteOwnPart(*backend, *a0, HostPlan(0)));
  CKPT_REQUIRE_OK(c0);
  CKPT_REQUIRE_OK(commit1.get());
  CHECK(StepExists(coord, 5));
  absl::StatusOr<v1::CheckpointManifest> manifest = coord.catalog().ReadManifest("job", 5);
  CKPT_REQUIRE_OK(manifest);
  CHECK(manifest->topology().hosts_size() == 2);
  CHECK(NoPartials(*backend));
}

// Saves `step` on both hosts, each planning and reporting from its own
// thread, and commits it. Only this thread asserts: Catch's assertions are
// not thread-safe (from two threads at once they corrupted its heap).
void SaveBoth(Coordinator& coord, storage::Backend& backend, int64_t step) {
  auto h1 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(1, step)); });
  absl::StatusOr<v1::SaveAssignment> a0 = coord.PlanSave(HostPlan(0, step));
  absl::StatusOr<v1::SaveAssignment> a1 = h1.get();
  CKPT_REQUIRE_OK(a0);
  CKPT_REQUIRE_OK(a1);
  const v1::NodePersistReport r1 = WriteOwnPart(backend, *a1, HostPlan(1, step));
  const v1::NodePersistReport r0 = WriteOwnPart(backend, *a0, HostPlan(0, step));
  auto commit1 = std::async(std::launch::async, [&] { return coord.ReportPersisted(r1); });
  CKPT_REQUIRE_OK(coord.ReportPersisted(r0));
  CKPT_REQUIRE_OK(commit1.get());
  REQUIRE(StepExists(coord, step));
}

TEST_CASE("rendezvous: an unchanged layout skips the barrier; a changed one plans afresh",
          "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  // A host that had to wait for the other would fail after 5 s.
  Coordinator coord(*backend, kRoot, SmallChunks(), {},
                    RendezvousOptions{.plan_timeout = absl::Seconds(5)});
  SaveBoth(coord, *backend, 5);
  CHECK(coord.barrier_skips() == 0);

  // Step 6, the same layout: h0 gets its part alone, writes and reports
  // before h1 even plans; the commit waits for h1.
  absl::StatusOr<v1::SaveAssignment> a0 = coord.PlanSave(HostPlan(0, 6));
  CKPT_REQUIRE_OK(a0);
  CHECK(coord.barrier_skips() == 1);
  const v1::NodePersistReport r0 = WriteOwnPart(*backend, *a0, HostPlan(0, 6));
  auto commit0 = std::async(std::launch::async, [&] { return coord.ReportPersisted(r0); });
  absl::StatusOr<v1::SaveAssignment> a1 = coord.PlanSave(HostPlan(1, 6));
  CKPT_REQUIRE_OK(a1);
  CHECK(a1->save_id() == a0->save_id());
  CKPT_REQUIRE_OK(coord.ReportPersisted(WriteOwnPart(*backend, *a1, HostPlan(1, 6))));
  CKPT_REQUIRE_OK(commit0.get());
  CHECK(StepExists(coord, 6));

  // Step 7: h0 unchanged goes on early, h1 comes with a large new shard,
  // so the replica "b" that h1 wrote is now h0's to write: h0's part
  // changed under it. The save fails on both, naming the change; nothing
  // stays behind. (A change that leaves h0's part as it was would commit.)
  absl::StatusOr<v1::SaveAssignment> early = coord.PlanSave(HostPlan(0, 7));
  CKPT_REQUIRE_OK(early);
  const v1::NodePersistReport early_report = WriteOwnPart(*backend, *early, HostPlan(0, 7));
  v1::NodeSavePlan changed = HostPlan(1, 7);
  AddShard(changed, 2, Whole("extra", v1::FLOAT32, {16384}));
  CKPT_REQUIRE_ERROR(coord.PlanSave(changed), absl::StatusCode::kFailedPrecondition,
                     "layout changed", "hosts h0 had already started");
  const absl::Status late = coord.ReportPersisted(early_report).status();
  CHECK(late.message().find("layout changed") != std::string::npos);
  CHECK(!StepExists(coord, 7));
  CHECK(NoPartials(*backend));

  // Saved again, step 7 is planned afresh with the barrier.
  const uint64_t skips = coord.barrier_skips();
  auto h0 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(0, 7)); });
  absl::StatusOr<v1::SaveAssignment> b1 = coord.PlanSave(changed);
  CKPT_REQUIRE_OK(b1);
  absl::StatusOr<v1::SaveAssignment> b0 = h0.get();
  CKPT_REQUIRE_OK(b0);
  CHECK(coord.barrier_skips() == skips);
  // Written here: only this thread asserts (see SaveBoth).
  const v1::NodePersistReport s0 = WriteOwnPart(*backend, *b0, HostPlan(0, 7));
  const v1::NodePersistReport s1 = WriteOwnPart(*backend, *b1, changed);
  auto commit = std::async(std::launch::async, [&] { return coord.ReportPersisted(s0); });
  CKPT_REQUIRE_OK(coord.ReportPersisted(s1));
  CKPT_REQUIRE_OK(commit.get());
  CHECK(StepExists(coord, 7));
}

TEST_CASE("rendezvous: a job with a long name commits (its save id is long too)", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  const std::string job(200, 'j');
  v1::NodeSavePlan node = Node("h0", 1, 1, {0}, job, 5);
  AddShard(node, 0, Whole("w", v1::FLOAT32, {100}));
  absl::StatusOr<v1::SaveAssignment> a = coord.PlanSave(node);
  CKPT_REQUIRE_OK(a);
  REQUIRE(a->save_id().size() > 200);
  CKPT_REQUIRE_OK(coord.ReportPersisted(WriteOwnPart(*backend, *a, node)));
  absl::StatusOr<bool> exists = coord.catalog().StepExists(job, 5);
  CKPT_REQUIRE_OK(exists);
  CHECK(*exists);
}

TEST_CASE("rendezvous: a rank planned on two hosts fails the save on both", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  auto h0 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(0)); });
  v1::NodeSavePlan clash = Node("h1", 3, 2, {1}, "job", 5);
  absl::StatusOr<v1::SaveAssignment> a1 = coord.PlanSave(clash);
  CKPT_REQUIRE_ERROR(a1, absl::StatusCode::kInvalidArgument, "rank 1 planned on both host");
  CKPT_REQUIRE_ERROR(h0.get(), absl::StatusCode::kInvalidArgument, "rank 1 planned on both");
  CHECK(NoPartials(*backend));
}

TEST_CASE("rendezvous: a host lost while the others write fails them, naming it", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  auto h1 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(1)); });
  absl::StatusOr<v1::SaveAssignment> a0 = coord.PlanSave(HostPlan(0));
  CKPT_REQUIRE_OK(a0);
  CKPT_REQUIRE_OK(h1.get());
  const v1::NodePersistReport r0 = WriteOwnPart(*backend, *a0, HostPlan(0));
  auto commit0 = std::async(std::launch::async, [&] { return coord.ReportPersisted(r0); });
  coord.HostLost("h1", "was lost: no heartbeat for 5s");
  // Waiting for h1 when it was lost (UNAVAILABLE), or reporting after
  // (NOT_FOUND): either way the error names it.
  const absl::Status committed = commit0.get().status();
  INFO(committed.ToString());
  CHECK((absl::IsUnavailable(committed) || absl::IsNotFound(committed)));
  CHECK(committed.message().find("host h1 (ranks 2 of 3 carried there) was lost") !=
        std::string::npos);
  CHECK(!StepExists(coord, 5));
  CHECK(NoPartials(*backend));
  const std::vector<std::pair<std::string, std::string>> failed =
      coord.FailedSaves({a0->save_id(), "job/5/not-a-save"});
  REQUIRE(failed.size() == 2);
  CHECK(failed[0].second.find("host h1 (ranks 2 of 3 carried there) was lost") !=
        std::string::npos);
  CHECK(failed[1].second.find("does not know this save") != std::string::npos);

  // A lost host joins no save until it registers again (a plan racing the
  // loss is refused, not left waiting); then the step is free again.
  CKPT_REQUIRE_ERROR(coord.PlanSave(HostPlan(1)), absl::StatusCode::kUnavailable,
                     "host h1 was lost to the coordinator");
  coord.HostRegistered("h1");
  auto again = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(1)); });
  CKPT_REQUIRE_OK(coord.PlanSave(HostPlan(0)));
  CKPT_REQUIRE_OK(again.get());
}

TEST_CASE("rendezvous: ranks that never come fail the save, named", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks(), {},
                    RendezvousOptions{.plan_timeout = absl::Milliseconds(300)});
  CKPT_REQUIRE_ERROR(coord.PlanSave(HostPlan(0)), absl::StatusCode::kDeadlineExceeded,
                     "ranks [2] (1 of 3) never reached the coordinator");
}

TEST_CASE("rendezvous: a host's abort by job and step frees the hosts waiting", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  auto h0 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(0)); });
  v1::AbortSaveRequest abort;
  abort.set_job("job");
  abort.set_step(5);
  abort.mutable_host()->set_host("h1");
  abort.set_reason("rank 2 went away");
  // The abort may come before h0's plan: then no save is gathering yet and
  // h0 would wait; abort until it has ended.
  while (h0.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    coord.AbortSave(abort);
  }
  CKPT_REQUIRE_ERROR(h0.get(), absl::StatusCode::kAborted, "host h1: rank 2 went away");
}

TEST_CASE("rendezvous: saves nobody waits on still end at their deadlines", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(
      *backend, kRoot, SmallChunks(), {},
      RendezvousOptions{.plan_timeout = absl::Seconds(5), .write_timeout = absl::Seconds(5)});
  SaveBoth(coord, *backend, 5);
  // Step 6: h0 goes on early, writes, and reports; h1 never comes. The
  // sweep fails the save at the gathering deadline, naming h1's rank.
  absl::StatusOr<v1::SaveAssignment> a0 = coord.PlanSave(HostPlan(0, 6));
  CKPT_REQUIRE_OK(a0);
  const v1::NodePersistReport r0 = WriteOwnPart(*backend, *a0, HostPlan(0, 6));
  auto commit0 = std::async(std::launch::async, [&] { return coord.ReportPersisted(r0); });
  coord.ExpireSaves(absl::Now() + absl::Seconds(6));
  RequireReportFailed(commit0.get(), "ranks [2] (1 of 3) never reached the coordinator");
  CHECK(NoPartials(*backend));
  // Step 7: both plan, h1 never reports: the write deadline names it.
  auto h1 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(1, 7)); });
  absl::StatusOr<v1::SaveAssignment> b0 = coord.PlanSave(HostPlan(0, 7));
  CKPT_REQUIRE_OK(b0);
  CKPT_REQUIRE_OK(h1.get());
  const v1::NodePersistReport s0 = WriteOwnPart(*backend, *b0, HostPlan(0, 7));
  auto commit = std::async(std::launch::async, [&] { return coord.ReportPersisted(s0); });
  coord.ExpireSaves(absl::Now() + absl::Seconds(6));
  // h1 never reported (h0's report may not have arrived yet either).
  const absl::StatusOr<v1::CommitResult> late = commit.get();
  RequireReportFailed(late, "did not report their files");
  CHECK(late.status().message().find("h1]") != std::string::npos);
  CHECK(!StepExists(coord, 7));
  CHECK(NoPartials(*backend));
}

TEST_CASE("rendezvous: a host reports only its own files", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  auto h1 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(1)); });
  absl::StatusOr<v1::SaveAssignment> a0 = coord.PlanSave(HostPlan(0));
  CKPT_REQUIRE_OK(a0);
  absl::StatusOr<v1::SaveAssignment> a1 = h1.get();
  CKPT_REQUIRE_OK(a1);
  v1::NodePersistReport r0 = WriteOwnPart(*backend, *a0, HostPlan(0));
  v1::ChunkChecksum* forged = r0.add_checksums();
  forged->set_file(a1->hosts(0).files(0));  // h1's
  forged->set_crc32c(1);
  CKPT_REQUIRE_ERROR(coord.ReportPersisted(r0), absl::StatusCode::kInvalidArgument,
                     "host h0 reported a checksum for file data/h1-");
}

TEST_CASE("rendezvous: a host that gave up stops waiting", "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  CKPT_REQUIRE_ERROR(coord.PlanSave(HostPlan(0), [] { return true; }), absl::StatusCode::kCancelled,
                     "gave up");
}

}  // namespace
}  // namespace ckpt::coordinator

namespace ckpt::coordinator {
namespace {

google::protobuf::RepeatedPtrField<v1::CarriedJob> Carried(const std::vector<uint32_t>& ranks) {
  google::protobuf::RepeatedPtrField<v1::CarriedJob> jobs;
  v1::CarriedJob* job = jobs.Add();
  job->set_job("job");
  job->set_world_size(3);
  for (uint32_t r : ranks) job->add_ranks(r);
  return jobs;
}

TEST_CASE("rendezvous: a host lost before its plan came fails the gathering, naming its ranks",
          "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  coord.HostCarries("h0", Carried({0, 1}));
  coord.HostCarries("h1", Carried({2}));
  // h0 waits for rank 2; h1 is lost before it planned.
  auto h0 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(0)); });
  while (coord.saves_in_flight() == 0) std::this_thread::yield();
  coord.HostLost("h1", "was lost: no heartbeat for 5s");
  CKPT_REQUIRE_ERROR(h0.get(), absl::StatusCode::kUnavailable,
                     "host h1 (ranks 2 of 3 carried there) was lost");
  CHECK(NoPartials(*backend));
}

TEST_CASE("rendezvous: a save begun after the loss fails past the grace, unless the ranks moved",
          "[rendezvous]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  RendezvousOptions rendezvous;
  rendezvous.lost_ranks_grace = absl::Seconds(1);
  Coordinator coord(*backend, kRoot, SmallChunks(), {}, rendezvous);
  coord.HostCarries("h1", Carried({2}));
  coord.HostLost("h1", "was lost: no heartbeat for 5s");

  auto h0 = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(0)); });
  while (coord.saves_in_flight() == 0) std::this_thread::yield();
  coord.ExpireSaves(absl::Now());  // within the grace: it waits on
  CHECK(coord.saves_in_flight() == 1);
  coord.ExpireSaves(absl::Now() + absl::Seconds(2));
  CKPT_REQUIRE_ERROR(h0.get(), absl::StatusCode::kUnavailable,
                     "host h1 (ranks 2 of 3 carried there) was lost");

  // The job restarted without h1: h2 carries rank 2 now, and the save
  // that waits for it is not failed.
  coord.HostCarries("h2", Carried({2}));
  auto again = std::async(std::launch::async, [&] { return coord.PlanSave(HostPlan(0, 6)); });
  while (coord.saves_in_flight() == 0) std::this_thread::yield();
  coord.ExpireSaves(absl::Now() + absl::Seconds(2));
  CHECK(coord.saves_in_flight() == 1);
  v1::NodeSavePlan from_h2 = HostPlan(1, 6);
  from_h2.mutable_host()->set_host("h2");
  CKPT_REQUIRE_OK(coord.PlanSave(from_h2));
  CKPT_REQUIRE_OK(again.get());
}

}  // namespace
}  // namespace ckpt::coordinator
