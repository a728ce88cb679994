// A raw gRPC client run as another local user by auth_test (under setpriv):
// it acts on a session it did not attach and a job it does not own, and
// prints each call's status code as "<name> <code>", one per line. Then it
// saves and loads a job of its own through the client library, and prints
// the pool segments that job was handed ("own_segments OFFSET:LENGTH ...").
//
// Usage: auth_probe SOCKET SESSION_ID JOB STEP
//        auth_probe attach-only SOCKET JOB   attaches rank 0 of a 2-rank job
//            raw, opens no Watch stream, prints "attached <session>", then
//            waits to be killed: a rank that dies before it watches.
//        auth_probe segments SOCKET          asks the segment socket for an
//            unknown session: prints "segments <code>" (PERMISSION_DENIED
//            for a user the daemon does not admit, NOT_FOUND otherwise).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "ckpt/client.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "proto/lib/segment_handover.h"

namespace {

// Fetches a segment table and prints "<name> <code>" and, when it came,
// "<name>_ranges OFFSET:LENGTH ...".
void ReportSegments(const char* name, const std::string& socket, const std::string& session,
                    uint64_t pool_bytes) {
  absl::StatusOr<ckpt::segments::SegmentTable> table =
      ckpt::segments::FetchSegmentTable(socket, session, pool_bytes, absl::Seconds(10));
  std::printf("%s %d %s\n", name, static_cast<int>(table.status().code()),
              std::string(table.status().message()).c_str());
  if (!table.ok()) return;
  std::printf("%s_ranges", name);
  for (const auto& s : table->segments) {
    std::printf(" %llu:%llu", static_cast<unsigned long long>(s.range.offset),
                static_cast<unsigned long long>(s.range.length));
  }
  std::printf("\n");
}

// Saves and loads a small tensor of the probe's own job through the client
// library: the segment handover works for this user, bit-exact.
void SaveAndLoadOwnJob(const std::string& socket, const std::string& job) {
  ckpt::ClientOptions options;
  options.socket_path = socket;
  options.job = job;
  auto client = ckpt::Client::Attach(options);
  if (!client.ok()) {
    std::printf("own_save 2 %s\n", std::string(client.status().message()).c_str());
    return;
  }
  std::vector<float> values(64 << 10);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f + 3.0f;
  ckpt::HostTensor tensor;
  tensor.fqn = "w";
  tensor.global_shape = {static_cast<int64_t>(values.size())};
  tensor.data = values.data();
  absl::Status saved;
  auto handle = (*client)->Save(1, {tensor}, {});
  saved = handle.ok() ? (*handle)->WaitPersisted() : handle.status();
  std::printf("own_save %d %s\n", static_cast<int>(saved.code()),
              std::string(saved.message()).c_str());
  std::vector<float> back(values.size(), -1.0f);
  tensor.data = back.data();
  absl::StatusOr<int64_t> loaded = (*client)->Load(1, {tensor});
  std::printf("own_load %d %s\n", static_cast<int>(loaded.status().code()),
              std::string(loaded.status().message()).c_str());
  std::printf("own_load_exact %d\n",
              loaded.ok() && std::memcmp(back.data(), values.data(), values.size() * 4) == 0);
}

}  // namespace

int AttachOnly(const std::string& socket, const std::string& job) {
  auto stub = ckpt::v1::NodeService::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  ckpt::v1::AttachRequest request;
  request.set_job(job);
  request.set_rank(0);
  request.set_world_size(2);
  ckpt::v1::AttachResponse response;
  grpc::ClientContext context;
  const grpc::Status s = stub->Attach(&context, request, &response);
  if (!s.ok()) {
    std::printf("attach %d %s\n", static_cast<int>(s.error_code()), s.error_message().c_str());
    return 1;
  }
  std::printf("attached %s\n", response.session_id().c_str());
  std::fflush(stdout);
  for (;;) pause();
}

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "attach-only") return AttachOnly(argv[2], argv[3]);
  if (argc == 3 && std::string(argv[1]) == "segments") {
    ReportSegments("segments", std::string(argv[2]) + ".seg", "0123456789abcdef", 1 << 20);
    return 0;
  }
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
  auto attach = [&](const char* name, const std::string& own_job) {
    ckpt::v1::AttachRequest request;
    request.set_job(own_job);
    request.set_rank(0);
    request.set_world_size(1);
    ckpt::v1::AttachResponse response;
    report(name, stub->Attach(context().get(), request, &response));
    return response;
  };
  {
    const ckpt::v1::AttachResponse attached = attach("attach_own_job", job + "-mine");
    // Root's session's segments are not ours to map.
    ReportSegments("segments_foreign_session", attached.segment_socket(), session,
                   attached.pool_bytes());
  }
  {
    SaveAndLoadOwnJob(argv[1], job + "-own");
    // Our own job's segments are ours to map: those the save above used.
    const ckpt::v1::AttachResponse attached = attach("attach_own_saved_job", job + "-own");
    ReportSegments("segments_own", attached.segment_socket(), attached.session_id(),
                   attached.pool_bytes());
  }
  return 0;
}
