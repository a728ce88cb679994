// Raw NodeService calls for tests that must control every field of a
// request (bad input, hostile clients), over any transport. Each call
// carries a deadline, so a daemon bug fails the test instead of hanging it.
//
// RawRank is one rank driven entirely through raw RPCs: it attaches, maps
// the daemon's pool, saves by copying packed bytes into the batches the
// daemon hands out and loads by following its deliveries. It works over TCP
// as well as the Unix socket (the client library speaks only the socket);
// the pool is shared memory, so the test runs on the daemon's host.
#ifndef CKPT_TESTS_SUPPORT_RAW_RPC_H_
#define CKPT_TESTS_SUPPORT_RAW_RPC_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/v1/node.grpc.pb.h"
#include "client/src/pool_mapping.h"

namespace ckpt::testing {

using NodeStub = v1::NodeService::Stub;

inline constexpr auto kRpcTimeout = std::chrono::seconds(30);

// Runs one raw RPC with a deadline: `call` gets the context.
template <typename Call>
grpc::Status Rpc(Call&& call, std::chrono::milliseconds timeout = kRpcTimeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  return call(&context);
}

// Deterministic bytes, different per seed (a step's bytes differ from the
// step before it, so a load of the wrong step shows).
std::string Pattern(size_t n, uint32_t seed);

// CHECKs the code and that the message contains `needle`.
void CheckError(const grpc::Status& status, grpc::StatusCode code, const std::string& needle);

grpc::Status AttachRaw(NodeStub& stub, const std::string& job, int rank, int world,
                       v1::AttachResponse* response);
// REQUIREs success; returns the session id.
std::string AttachOk(NodeStub& stub, const std::string& job, int rank = 0, int world = 1);
grpc::Status DetachRaw(NodeStub& stub, const std::string& session);

v1::TensorShard Whole(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape);
v1::TensorShard Boxed(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape,
                      std::vector<int64_t> offsets, std::vector<int64_t> lengths);
v1::TensorShard Flat(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape,
                     int64_t begin, int64_t end);

grpc::Status Plan(NodeStub& stub, const std::string& session, int64_t step,
                  const std::vector<v1::TensorShard>& shards, v1::PlanSaveResponse* response,
                  const std::vector<v1::ObjectDesc>& objects = {}, bool partial = false);
grpc::Status LoadRaw(NodeStub& stub, const std::string& session, int64_t step,
                     const std::vector<v1::TensorShard>& tensors,
                     const std::vector<std::string>& object_keys = {});
// Loops WaitSave (each call answers within the daemon's wait slice) until
// the save has an outcome.
grpc::Status WaitSaveRaw(NodeStub& stub, const std::string& session, const std::string& save_id);

// A shard and its packed bytes (saving reads them, loading fills them).
// A load's memory space (LoadResponse.memory_bytes) mapped read-only, as
// the client library maps it; null when the load has none.
absl::StatusOr<std::unique_ptr<client::PoolMapping>> MapLoadMemory(
    const std::string& segment_socket, const std::string& session,
    const v1::LoadResponse& response);

// Where a delivery's i-th run comes from: the pool, or the memory space.
absl::StatusOr<char*> DeliverySource(const client::PoolMapping& pool,
                                     const client::PoolMapping* memory, const v1::Delivery& d,
                                     uint64_t i);

struct RawTensor {
  v1::TensorShard shard;
  std::string bytes;
};
struct RawObject {
  std::string key;
  std::string bytes;
  bool global = false;
};

class RawRank {
 public:
  // REQUIREs the attach and the pool mapping to succeed.
  RawRank(NodeStub& stub, const std::string& job, int rank = 0, int world = 1);
  ~RawRank();  // detaches
  RawRank(const RawRank&) = delete;
  RawRank& operator=(const RawRank&) = delete;

  const std::string& session() const { return session_; }
  char* pool() const { return pool_->base(); }

  // The steps of a save, for tests that interleave other calls.
  grpc::Status PlanSave(int64_t step, const std::vector<RawTensor>& tensors,
                        const std::vector<RawObject>& objects, v1::PlanSaveResponse* planned,
                        bool partial = false);
  grpc::Status NextBatch(const std::string& save_id, v1::SaveBatch* batch);
  // Copies each slice's bytes into the pool (INTERNAL if the daemon handed
  // out a slice outside the pool or the item).
  grpc::Status Fill(const v1::SaveBatch& batch, const std::vector<RawTensor>& tensors,
                    const std::vector<RawObject>& objects);
  grpc::Status Submit(const std::string& save_id, uint64_t batch_id);
  // Plan, every batch, wait for the commit.
  grpc::Status Save(int64_t step, const std::vector<RawTensor>& tensors,
                    const std::vector<RawObject>& objects, bool partial = false);

  // Fills each tensor's bytes (resized to its packed size) and each
  // object's bytes (by key) from the step; returns the step loaded.
  grpc::Status Load(int64_t step, std::vector<RawTensor>& tensors,
                    std::map<std::string, std::string>& objects, int64_t* loaded = nullptr);

 private:
  NodeStub& stub_;
  std::string session_;
  std::string segment_socket_;
  std::unique_ptr<client::PoolMapping> pool_;
};

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_RAW_RPC_H_
