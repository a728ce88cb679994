// Bad input against a real ckptd (docs/design.md §7): every malformed request gets
// the right gRPC code and a message naming what was wrong, and the daemon
// keeps serving: after each case it still answers GetStatus, holds no pool
// bytes or save for the rejected request, and completes a valid save and a
// byte-exact load (of the same job and step where the rejected request must
// not have poisoned them).
//
// Requests go through the raw stub (tests/support/raw_rpc.h) so the test
// controls every field; each raw RPC carries a deadline so a daemon bug
// fails the test instead of hanging it. Valid saves and loads go through
// ckpt::Client. tests/fault/hostile_client_test.cc sends larger and stranger
// requests over both transports.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/client.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/test_daemon.h"
#include "tools/demo/model_layout.h"
#include "tools/demo/tensor_pattern.h"

namespace ckpt::testing {
namespace {

using Stub = NodeStub;

// The daemon answers, holds no pool bytes and lists no save in flight.
void RequireIdleAndServing(const TestDaemon& d) {
  auto stub = d.Stub();
  v1::GetStatusResponse status;
  const grpc::Status s = Rpc(
      [&](grpc::ClientContext* c) { return stub->GetStatus(c, v1::GetStatusRequest(), &status); });
  INFO("GetStatus: " << s.error_message() << "\nckptd output:\n" << d.Output());
  REQUIRE(s.ok());
  CHECK(status.pool_used_bytes() == 0);
  for (const v1::SaveProgress& save : status.saves()) {
    FAIL_CHECK("save of job " << save.job() << " step " << save.step() << " still listed in phase "
                              << save.phase());
  }
}

ClientOptions Options(const TestDaemon& d, const std::string& job) {
  ClientOptions options;
  options.socket_path = d.socket();
  options.job = job;
  options.rank = 0;
  options.world_size = 1;
  return options;
}

// A complete one-rank save of the demo model through the client.
void SaveValid(const TestDaemon& d, const std::string& job, int64_t step) {
  auto client = Client::Attach(Options(d, job));
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  std::vector<HostTensor> tensors = SaveLayout(0, 1, 1);
  std::vector<std::vector<char>> buffers;
  buffers.reserve(tensors.size());
  for (HostTensor& t : tensors) {
    absl::StatusOr<std::vector<char>> bytes = PatternShard(t);
    REQUIRE(bytes.ok());
    buffers.push_back(std::move(*bytes));
    t.data = buffers.back().data();
  }
  auto handle = (*client)->Save(step, tensors, SaveObjects(0));
  INFO(handle.status().ToString());
  REQUIRE(handle.ok());
  const absl::Status persisted = (*handle)->WaitPersisted();
  INFO(persisted.ToString());
  REQUIRE(persisted.ok());
}

// Loads the step under another sharding and compares every byte.
void LoadAndCompare(const TestDaemon& d, const std::string& job, int64_t step) {
  auto client = Client::Attach(Options(d, job));
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  std::vector<HostTensor> tensors = LoadLayout(0, 1, 1);
  std::vector<std::vector<char>> buffers;
  buffers.reserve(tensors.size());
  for (HostTensor& t : tensors) {
    absl::StatusOr<int64_t> bytes = ShardBytes(t);
    REQUIRE(bytes.ok());
    buffers.emplace_back(*bytes, '\0');
    t.data = buffers.back().data();
  }
  std::string rng;
  std::string dataloader;
  absl::StatusOr<int64_t> loaded =
      (*client)->Load(step, tensors, {{"rng", &rng}, {"dataloader", &dataloader}});
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  CHECK(*loaded == step);
  for (const HostTensor& t : tensors) {
    int64_t first = -1;
    absl::StatusOr<int64_t> bad = CountMismatches(t, static_cast<const char*>(t.data), &first);
    REQUIRE(bad.ok());
    INFO(t.fqn << ": first differing byte at " << first);
    CHECK(*bad == 0);
  }
  CHECK(rng == RngObjectBytes(0));
  CHECK(dataloader == DataloaderObjectBytes());
}

// The end of every case: the daemon still does real work.
void RequireStillServes(const TestDaemon& d, const std::string& job, int64_t step) {
  RequireIdleAndServing(d);
  SaveValid(d, job, step);
  LoadAndCompare(d, job, step);
  RequireIdleAndServing(d);
}

bool HasStepOrPartialDir(const TestDaemon& d, const std::string& job) {
  for (const std::string& name : ListDir(d.job_dir(job))) {
    if (name.rfind("step-", 0) == 0 || name.rfind(".step-", 0) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("Attach rejects job names that are paths or empty", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  v1::AttachResponse response;

  CheckError(AttachRaw(*stub, "../evil", 0, 1, &response), grpc::StatusCode::INVALID_ARGUMENT,
             "job name '../evil'");
  CheckError(AttachRaw(*stub, "a/b", 0, 1, &response), grpc::StatusCode::INVALID_ARGUMENT,
             "job name 'a/b'");
  CheckError(AttachRaw(*stub, "", 0, 1, &response), grpc::StatusCode::INVALID_ARGUMENT,
             "job name is empty");
  CheckError(AttachRaw(*stub, "..", 0, 1, &response), grpc::StatusCode::INVALID_ARGUMENT,
             "job name '..'");
  // Beyond a bound: RESOURCE_EXHAUSTED naming it.
  CheckError(AttachRaw(*stub, std::string(300, 'j'), 0, 1, &response),
             grpc::StatusCode::RESOURCE_EXHAUSTED, "job name is 300 bytes; the limit is 255");
  CheckError(AttachRaw(*stub, "okjob", 2, 2, &response), grpc::StatusCode::INVALID_ARGUMENT,
             "rank 2 is outside world size 2");
  CheckError(AttachRaw(*stub, "okjob", 0, 0, &response), grpc::StatusCode::INVALID_ARGUMENT,
             "world size 0");
  // Nothing was created for the rejected names, inside or outside the root.
  for (const std::string& name : ListDir(d.dir())) CHECK(name != "evil");
  for (const std::string& name : ListDir(d.root())) CHECK((name != "a" && name != "evil"));

  RequireStillServes(d, "names-ok", 1);
}

TEST_CASE("PlanSave rejects a negative dimension", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string session = AttachOk(*stub, "negdim");
  v1::PlanSaveResponse planned;

  CheckError(Plan(*stub, session, 3, {Whole("w", v1::FLOAT32, {4, -1})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "negative dimension");
  CheckError(Plan(*stub, session, 3, {Whole("w", v1::FLOAT32, {4, -1})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "tensor w");

  RequireStillServes(d, "negdim", 3);
}

TEST_CASE("PlanSave rejects shapes whose size overflows", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string session = AttachOk(*stub, "overflow");
  v1::PlanSaveResponse planned;

  // 2^80 elements.
  CheckError(Plan(*stub, session, 4,
                  {Whole("w", v1::FLOAT32, {int64_t{1} << 40, int64_t{1} << 40})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "more than 2^63-1 elements");
  // 2^62 elements fit, 2^64 bytes do not.
  CheckError(Plan(*stub, session, 4,
                  {Whole("w", v1::FLOAT32, {int64_t{1} << 31, int64_t{1} << 31})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "more than 2^63-1 bytes");

  RequireStillServes(d, "overflow", 4);
}

TEST_CASE("PlanSave rejects regions outside the tensor", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string session = AttachOk(*stub, "region");
  v1::PlanSaveResponse planned;

  CheckError(Plan(*stub, session, 5, {Boxed("w", v1::FLOAT32, {4, 8}, {2, 0}, {3, 8})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT,
             "offset 2 + length 3 exceeds dimension 0 of size 4");
  CheckError(
      Plan(*stub, session, 5, {Boxed("w", v1::FLOAT32, {4, 8}, {0, INT64_MAX}, {4, 1})}, &planned),
      grpc::StatusCode::INVALID_ARGUMENT, "exceeds dimension 1 of size 8");
  CheckError(Plan(*stub, session, 5, {Boxed("w", v1::FLOAT32, {4, 8}, {-1, 0}, {1, 8})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "offset -1 in dimension 0 is negative");
  CheckError(Plan(*stub, session, 5, {Boxed("w", v1::FLOAT32, {4, 8}, {0}, {4})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "shape has rank 2");
  CheckError(Plan(*stub, session, 5, {Flat("w", v1::FLOAT32, {4, 8}, 0, 33)}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "flat end 33 exceeds the 32 elements");
  CheckError(Plan(*stub, session, 5, {Flat("w", v1::FLOAT32, {4, 8}, 9, 8)}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "flat begin 9 is after its end 8");

  RequireStillServes(d, "region", 5);
}

TEST_CASE("PlanSave rejects ranks that disagree on a tensor's dtype", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string s0 = AttachOk(*stub, "dtypes", 0, 2);
  const std::string s1 = AttachOk(*stub, "dtypes", 1, 2);

  grpc::Status status[2];
  v1::PlanSaveResponse planned[2];
  std::thread rank1([&] {
    status[1] = Plan(*stub, s1, 6, {Whole("w", v1::FLOAT16, {4, 8})}, &planned[1]);
  });
  status[0] = Plan(*stub, s0, 6, {Whole("w", v1::FLOAT32, {4, 8})}, &planned[0]);
  rank1.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CheckError(status[r], grpc::StatusCode::INVALID_ARGUMENT, "dtype");
    CheckError(status[r], grpc::StatusCode::INVALID_ARGUMENT, "FLOAT16");
    CheckError(status[r], grpc::StatusCode::INVALID_ARGUMENT, "tensor w");
  }
  CHECK_FALSE(HasStepOrPartialDir(d, "dtypes"));

  // The rejected plan must not poison the step: the job saves it now.
  RequireStillServes(d, "dtypes", 6);
}

TEST_CASE("PlanSave rejects distinct regions that overlap", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string s0 = AttachOk(*stub, "overlap", 0, 2);
  const std::string s1 = AttachOk(*stub, "overlap", 1, 2);

  grpc::Status status[2];
  v1::PlanSaveResponse planned[2];
  std::thread rank1([&] {
    status[1] = Plan(*stub, s1, 7, {Boxed("w", v1::FLOAT32, {4, 8}, {2, 0}, {2, 8})}, &planned[1]);
  });
  status[0] = Plan(*stub, s0, 7, {Boxed("w", v1::FLOAT32, {4, 8}, {0, 0}, {3, 8})}, &planned[0]);
  rank1.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CheckError(status[r], grpc::StatusCode::INVALID_ARGUMENT, "overlap");
    CheckError(status[r], grpc::StatusCode::INVALID_ARGUMENT, "tensor w");
  }
  CHECK_FALSE(HasStepOrPartialDir(d, "overlap"));

  RequireStillServes(d, "overlap", 7);
}

TEST_CASE("SubmitSnapshot takes only batches the daemon handed to the caller", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string job = "batches";
  const std::string session = AttachOk(*stub, job);
  const std::string intruder = AttachOk(*stub, "intruder");

  v1::PlanSaveResponse planned;
  const grpc::Status plan = Plan(*stub, session, 8, {Whole("w", v1::FLOAT32, {4, 8})}, &planned);
  INFO(plan.error_message());
  REQUIRE(plan.ok());
  REQUIRE(planned.items_size() == 1);

  // Another job's session can neither take nor submit this save's batches.
  v1::NextSaveBatchRequest next;
  next.set_session_id(intruder);
  next.set_save_id(planned.save_id());
  v1::SaveBatch stolen;
  CheckError(Rpc([&](grpc::ClientContext* c) { return stub->NextSaveBatch(c, next, &stolen); }),
             grpc::StatusCode::PERMISSION_DENIED, "intruder");

  next.set_session_id(session);
  v1::SaveBatch batch;
  REQUIRE(Rpc([&](grpc::ClientContext* c) { return stub->NextSaveBatch(c, next, &batch); }).ok());
  REQUIRE(batch.slices_size() == 1);
  CHECK(batch.slices(0).pool_offset() % 4096 == 0);

  v1::SubmitSnapshotRequest request;
  request.set_session_id(intruder);
  request.set_save_id(planned.save_id());
  request.set_batch_id(batch.batch_id());
  v1::SubmitSnapshotResponse submitted;
  CheckError(
      Rpc([&](grpc::ClientContext* c) { return stub->SubmitSnapshot(c, request, &submitted); }),
      grpc::StatusCode::PERMISSION_DENIED, "intruder");

  // A batch id it was never given.
  request.set_session_id(session);
  request.set_batch_id(uint64_t{1} << 62);
  CheckError(
      Rpc([&](grpc::ClientContext* c) { return stub->SubmitSnapshot(c, request, &submitted); }),
      grpc::StatusCode::INVALID_ARGUMENT, "not an open batch");

  // The right one, then the same one again.
  request.set_batch_id(batch.batch_id());
  REQUIRE(Rpc([&](grpc::ClientContext* c) {
            return stub->SubmitSnapshot(c, request, &submitted);
          }).ok());
  CheckError(
      Rpc([&](grpc::ClientContext* c) { return stub->SubmitSnapshot(c, request, &submitted); }),
      grpc::StatusCode::INVALID_ARGUMENT, "not an open batch");
  // None of that harmed the save: it commits with the rank's own bytes.
  CHECK(WaitSaveRaw(*stub, session, planned.save_id()).ok());
  RequireIdleAndServing(d);
  RequireStillServes(d, job, 9);
}

TEST_CASE("Load of a tensor or object the checkpoint does not hold", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string job = "nofqn";
  SaveValid(d, job, 10);
  const std::string session = AttachOk(*stub, job);

  CheckError(LoadRaw(*stub, session, 10, {Whole("model.no_such.weight", v1::FLOAT32, {4, 8})}),
             grpc::StatusCode::NOT_FOUND, "model.no_such.weight");
  CheckError(LoadRaw(*stub, session, 10, {}, {"no_such_object"}), grpc::StatusCode::NOT_FOUND,
             "no_such_object");
  // A tensor that exists, asked for with another dtype.
  CheckError(LoadRaw(*stub, session, 10, {Whole("optimizer.loss_scale", v1::FLOAT32, {})}),
             grpc::StatusCode::INVALID_ARGUMENT, "dtype");

  RequireIdleAndServing(d);
  LoadAndCompare(d, job, 10);
  RequireStillServes(d, job, 11);
}

TEST_CASE("Load of a step that does not exist", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string job = "nostep";

  // No checkpoint of the job at all.
  const std::string session = AttachOk(*stub, job);
  CheckError(LoadRaw(*stub, session, kLatestStep, {}, {"rng"}), grpc::StatusCode::NOT_FOUND,
             "no committed checkpoint");
  SaveValid(d, job, 12);
  CheckError(LoadRaw(*stub, session, 999, {}, {"rng"}), grpc::StatusCode::NOT_FOUND,
             "no committed step 999");
  CheckError(LoadRaw(*stub, session, -2, {}, {"rng"}), grpc::StatusCode::INVALID_ARGUMENT,
             "step -2");

  RequireIdleAndServing(d);
  LoadAndCompare(d, job, 12);
  RequireStillServes(d, job, 13);
}

TEST_CASE("A second save of a committed step is refused", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string job = "twice";
  SaveValid(d, job, 14);

  const std::string session = AttachOk(*stub, job);
  v1::PlanSaveResponse planned;
  CheckError(Plan(*stub, session, 14, {Whole("w", v1::FLOAT32, {4, 8})}, &planned),
             grpc::StatusCode::ALREADY_EXISTS,
             "save of job twice step 14: this step is already committed");
  RequireIdleAndServing(d);

  // Through the client too: the error comes back through the handle.
  {
    auto client = Client::Attach(Options(d, job));
    REQUIRE(client.ok());
    std::vector<char> bytes(4 * 8 * 4, '\1');
    HostTensor t;
    t.fqn = "w";
    t.global_shape = {4, 8};
    t.data = bytes.data();
    auto handle = (*client)->Save(14, {t}, {});
    REQUIRE(handle.ok());
    const absl::Status persisted = (*handle)->WaitPersisted();
    INFO(persisted.ToString());
    CHECK(absl::IsAlreadyExists(persisted));
    CHECK_THAT(std::string(persisted.message()), Catch::Contains("already committed"));
  }

  // The committed checkpoint is untouched.
  RequireIdleAndServing(d);
  LoadAndCompare(d, job, 14);
  RequireStillServes(d, job, 15);
}

TEST_CASE("Requests with an unknown session are refused", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string job = "nosession";
  SaveValid(d, job, 16);

  // Never attached, and attached then detached.
  const std::string detached = AttachOk(*stub, job);
  {
    v1::DetachRequest request;
    request.set_session_id(detached);
    v1::DetachResponse response;
    REQUIRE(Rpc([&](grpc::ClientContext* c) { return stub->Detach(c, request, &response); }).ok());
  }
  for (const std::string& session : {std::string("0123456789abcdef0123456789abcdef"), detached}) {
    INFO("session '" << session << "'");
    v1::PlanSaveResponse planned;
    CheckError(Plan(*stub, session, 17, {Whole("w", v1::FLOAT32, {4, 8})}, &planned),
               grpc::StatusCode::NOT_FOUND, "attach first");
    CheckError(LoadRaw(*stub, session, 16, {}, {"rng"}), grpc::StatusCode::NOT_FOUND,
               "attach first");
    v1::SubmitSnapshotRequest submit;
    submit.set_session_id(session);
    submit.set_save_id("nosession/17/0000000000000000");
    v1::SubmitSnapshotResponse submitted;
    CheckError(
        Rpc([&](grpc::ClientContext* c) { return stub->SubmitSnapshot(c, submit, &submitted); }),
        grpc::StatusCode::NOT_FOUND, "attach first");
  }
  v1::PlanSaveResponse planned;
  CheckError(Plan(*stub, "", 17, {Whole("w", v1::FLOAT32, {4, 8})}, &planned),
             grpc::StatusCode::NOT_FOUND, "attach first");

  RequireIdleAndServing(d);
  LoadAndCompare(d, job, 16);
  RequireStillServes(d, job, 17);
}

TEST_CASE("Unsupported dtype values are refused", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string job = "baddtype";
  const std::string session = AttachOk(*stub, job);
  v1::PlanSaveResponse planned;

  CheckError(Plan(*stub, session, 18, {Whole("w", static_cast<v1::DType>(99), {4, 8})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "unsupported dtype dtype(99)");
  CheckError(Plan(*stub, session, 18, {Whole("w", v1::DTYPE_UNSPECIFIED, {4, 8})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "unsupported dtype DTYPE_UNSPECIFIED");
  CheckError(Plan(*stub, session, 18, {Whole("w", static_cast<v1::DType>(-7), {4, 8})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "unsupported dtype dtype(-7)");

  SaveValid(d, job, 18);
  CheckError(
      LoadRaw(*stub, session, 18, {Whole("optimizer.loss_scale", static_cast<v1::DType>(99), {})}),
      grpc::StatusCode::INVALID_ARGUMENT, "unsupported dtype dtype(99)");

  RequireIdleAndServing(d);
  LoadAndCompare(d, job, 18);
  RequireStillServes(d, job, 19);
}

TEST_CASE("PlanSave rejects tensor and object names that are paths", "[bad_input]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  auto stub = d.Stub();
  const std::string job = "badnames";
  const std::string session = AttachOk(*stub, job);
  v1::PlanSaveResponse planned;

  CheckError(Plan(*stub, session, 20, {Whole("../w", v1::FLOAT32, {4, 8})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "tensor name '../w'");
  CheckError(Plan(*stub, session, 20, {Whole("", v1::FLOAT32, {4, 8})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "tensor name is empty");
  v1::ObjectDesc object;
  object.set_key("a/b");
  object.set_length(3);
  CheckError(Plan(*stub, session, 20, {}, &planned, {object}), grpc::StatusCode::INVALID_ARGUMENT,
             "object name 'a/b'");
  CheckError(Plan(*stub, session, -1, {Whole("w", v1::FLOAT32, {4, 8})}, &planned),
             grpc::StatusCode::INVALID_ARGUMENT, "step -1 is negative");

  RequireStillServes(d, job, 20);
}

}  // namespace ckpt::testing
