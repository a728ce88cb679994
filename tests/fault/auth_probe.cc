// A raw gRPC client run as another local user by auth_test (under setpriv):
// it acts on a session it did not attach and a job it does not own, and
// prints each call's status code as "<name> <code>", one per line.
//
// Usage: auth_probe SOCKET SESSION_ID JOB STEP
#include <cstdio>
#include <string>

#include <grpcpp/grpcpp.h>

#include "ckpt/v1/node.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: auth_probe SOCKET SESSION_ID JOB STEP\n");
    return 2;
  }
  const std::string session = argv[2];
  const std::string job = argv[3];
  const int64_t step = std::stoll(argv[4]);
  auto stub = ckpt::v1::NodeService::NewStub(
      grpc::CreateChannel(std::string("unix:") + argv[1], grpc::InsecureChannelCredentials()));
  auto report = [](const char* name, const grpc::Status& s) {
    std::printf("%s %d %s\n", name, static_cast<int>(s.error_code()), s.error_message().c_str());
  };
  auto context = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  };
  {
    ckpt::v1::AttachRequest request;
    request.set_job(job);
    request.set_rank(0);
    request.set_world_size(1);
    ckpt::v1::AttachResponse response;
    report("attach_foreign_job", stub->Attach(context().get(), request, &response));
  }
  {
    ckpt::v1::LoadRequest request;
    request.set_session_id(session);
    request.set_step(step);
    ckpt::v1::LoadResponse response;
    report("load_with_foreign_session", stub->Load(context().get(), request, &response));
  }
  {
    ckpt::v1::DetachRequest request;
    request.set_session_id(session);
    ckpt::v1::DetachResponse response;
    report("detach_foreign_session", stub->Detach(context().get(), request, &response));
  }
  {
    ckpt::v1::ListCheckpointsRequest request;
    request.set_job(job);
    ckpt::v1::ListCheckpointsResponse response;
    report("list_foreign_job", stub->ListCheckpoints(context().get(), request, &response));
  }
  {
    ckpt::v1::InspectCheckpointRequest request;
    request.set_job(job);
    request.set_step(step);
    ckpt::v1::InspectCheckpointResponse response;
    report("inspect_foreign_job", stub->InspectCheckpoint(context().get(), request, &response));
  }
  {
    ckpt::v1::CancelSaveRequest request;
    request.set_job(job);
    request.set_step(step);
    ckpt::v1::CancelSaveResponse response;
    report("cancel_foreign_job", stub->CancelSave(context().get(), request, &response));
  }
  {
    ckpt::v1::CollectGarbageRequest request;
    request.set_job(job);
    request.set_keep_last(1);
    request.set_dry_run(true);
    ckpt::v1::CollectGarbageResponse response;
    report("gc_foreign_job", stub->CollectGarbage(context().get(), request, &response));
  }
  {
    ckpt::v1::GetStatusRequest request;
    ckpt::v1::GetStatusResponse response;
    const grpc::Status s = stub->GetStatus(context().get(), request, &response);
    report("status", s);
    std::printf("status_saves_shown %d\n", response.saves_size());
  }
  {
    ckpt::v1::AttachRequest request;
    request.set_job(job + "-mine");
    request.set_rank(0);
    request.set_world_size(1);
    ckpt::v1::AttachResponse response;
    report("attach_own_job", stub->Attach(context().get(), request, &response));
    std::printf("pool_path %s\n", response.pool_path().c_str());
  }
  return 0;
}
