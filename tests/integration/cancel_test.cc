// ckptctl cancel stops a save in flight: its partial directory goes away,
// every rank's handle reports CANCELLED, the daemon serves on.
#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/status/status.h"
#include "ckpt/client.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"
#include "tools/demo/model_layout.h"
#include "tools/demo/tensor_pattern.h"

namespace ckpt::testing {
namespace {

bool HasPartialDir(const TestDaemon& d, const std::string& job) {
  for (const std::string& name : ListDir(d.job_dir(job))) {
    if (name.find(".partial-") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("cancel of a save in flight", "[integration][cancel]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  // Rank 0 is a real client; rank 1 is driven by hand so that the save stays
  // in flight (planned, rank 0's chunks written, rank 1 not yet snapshotted).
  ClientOptions options;
  options.socket_path = d.socket();
  options.job = "cancelme";
  options.world_size = 2;
  options.rank = 0;
  auto client = Client::Attach(options);
  REQUIRE(client.ok());

  auto stub = d.Stub();
  v1::AttachResponse attached;
  {
    grpc::ClientContext context;
    v1::AttachRequest request;
    request.set_job("cancelme");
    request.set_rank(1);
    request.set_world_size(2);
    REQUIRE(stub->Attach(&context, request, &attached).ok());
  }

  std::vector<HostTensor> tensors = SaveLayout(0, 1, 1);  // whole tensors
  std::vector<std::vector<char>> buffers;
  for (HostTensor& t : tensors) {
    buffers.push_back(*PatternShard(t));
    t.data = buffers.back().data();
  }
  auto handle = (*client)->Save(7, tensors, {});
  REQUIRE(handle.ok());

  // Rank 1 plans the same (replicated) tensors: the plan barrier completes.
  v1::PlanSaveResponse planned;
  {
    grpc::ClientContext context;
    v1::PlanSaveRequest request;
    request.set_session_id(attached.session_id());
    request.set_step(7);
    for (const HostTensor& t : tensors) {
      v1::TensorShard* shard = request.add_shards();
      shard->set_fqn(t.fqn);
      shard->set_dtype(static_cast<v1::DType>(t.dtype));
      for (int64_t dim : t.global_shape) shard->add_global_shape(dim);
    }
    grpc::Status s = stub->PlanSave(&context, request, &planned);
    INFO(s.error_message());
    REQUIRE(s.ok());
  }
  REQUIRE((*handle)->WaitSnapshot().ok());
  REQUIRE(HasPartialDir(d, "cancelme"));

  ExitInfo cancel = d.Ckptctl({"cancel", "cancelme", "7"});
  INFO(cancel.output);
  REQUIRE(cancel.ok());

  const absl::Status persisted = (*handle)->WaitPersisted();
  CHECK(absl::IsCancelled(persisted));
  CHECK(persisted.message().find("cancelled by operator") != absl::string_view::npos);
  CHECK_FALSE(HasPartialDir(d, "cancelme"));
  for (const std::string& name : ListDir(d.job_dir("cancelme"))) CHECK(name != "step-7");

  // Rank 1's late snapshot is refused with the save's status.
  {
    grpc::ClientContext context;
    v1::SubmitSnapshotRequest request;
    request.set_session_id(attached.session_id());
    request.set_save_id(planned.save_id());
    v1::SubmitSnapshotResponse response;
    grpc::Status s = stub->SubmitSnapshot(&context, request, &response);
    CHECK(s.error_code() == grpc::StatusCode::CANCELLED);
  }
  // Cancelling again: nothing in flight.
  CHECK(d.Ckptctl({"cancel", "cancelme", "7"}).exit_code == 1);

  // The daemon serves on: another job saves and commits.
  ClientOptions solo = options;
  solo.job = "after-cancel";
  solo.world_size = 1;
  auto other = Client::Attach(solo);
  REQUIRE(other.ok());
  auto saved = (*other)->Save(1, tensors, {});
  REQUIRE(saved.ok());
  CHECK((*saved)->WaitPersisted().ok());
  grpc::ClientContext context;
  v1::GetStatusResponse status;
  CHECK(stub->GetStatus(&context, v1::GetStatusRequest(), &status).ok());
}

}  // namespace ckpt::testing
