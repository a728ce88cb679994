#include "tests/support/raw_rpc.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/segment_handover.h"
#include "tests/catch.h"

namespace ckpt::testing {

std::string Pattern(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = static_cast<char>(x);
  }
  return out;
}

void CheckError(const grpc::Status& status, grpc::StatusCode code, const std::string& needle) {
  INFO("status code " << status.error_code() << ": " << status.error_message());
  CHECK(status.error_code() == code);
  CHECK_THAT(status.error_message(), Catch::Contains(needle));
}

grpc::Status AttachRaw(NodeStub& stub, const std::string& job, int rank, int world,
                       v1::AttachResponse* response) {
  v1::AttachRequest request;
  request.set_job(job);
  request.set_rank(rank);
  request.set_world_size(world);
  return Rpc([&](grpc::ClientContext* c) { return stub.Attach(c, request, response); });
}

std::string AttachOk(NodeStub& stub, const std::string& job, int rank, int world) {
  v1::AttachResponse response;
  const grpc::Status s = AttachRaw(stub, job, rank, world, &response);
  INFO(s.error_message());
  REQUIRE(s.ok());
  REQUIRE(!response.session_id().empty());
  return response.session_id();
}

grpc::Status DetachRaw(NodeStub& stub, const std::string& session) {
  v1::DetachRequest request;
  request.set_session_id(session);
  v1::DetachResponse response;
  return Rpc([&](grpc::ClientContext* c) { return stub.Detach(c, request, &response); });
}

v1::TensorShard Whole(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape) {
  v1::TensorShard shard;
  shard.set_fqn(fqn);
  shard.set_dtype(dtype);
  for (int64_t d : shape) shard.add_global_shape(d);
  return shard;
}

v1::TensorShard Boxed(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape,
                      std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
  v1::TensorShard shard = Whole(fqn, dtype, std::move(shape));
  v1::Box* box = shard.mutable_region()->mutable_box();
  for (int64_t o : offsets) box->add_offsets(o);
  for (int64_t l : lengths) box->add_lengths(l);
  return shard;
}

v1::TensorShard Flat(const std::string& fqn, v1::DType dtype, std::vector<int64_t> shape,
                     int64_t begin, int64_t end) {
  v1::TensorShard shard = Whole(fqn, dtype, std::move(shape));
  shard.mutable_region()->mutable_flat()->set_begin(begin);
  shard.mutable_region()->mutable_flat()->set_end(end);
  return shard;
}

grpc::Status Plan(NodeStub& stub, const std::string& session, int64_t step,
                  const std::vector<v1::TensorShard>& shards, v1::PlanSaveResponse* response,
                  const std::vector<v1::ObjectDesc>& objects, bool partial) {
  v1::PlanSaveRequest request;
  request.set_session_id(session);
  request.set_step(step);
  request.set_partial(partial);
  for (const v1::TensorShard& s : shards) *request.add_shards() = s;
  for (const v1::ObjectDesc& o : objects) *request.add_objects() = o;
  return Rpc([&](grpc::ClientContext* c) { return stub.PlanSave(c, request, response); });
}

grpc::Status LoadRaw(NodeStub& stub, const std::string& session, int64_t step,
                     const std::vector<v1::TensorShard>& tensors,
                     const std::vector<std::string>& object_keys) {
  v1::LoadRequest request;
  request.set_session_id(session);
  request.set_step(step);
  for (const v1::TensorShard& t : tensors) *request.add_tensors() = t;
  for (const std::string& k : object_keys) request.add_object_keys(k);
  v1::LoadResponse response;
  return Rpc([&](grpc::ClientContext* c) { return stub.Load(c, request, &response); });
}

grpc::Status WaitSaveRaw(NodeStub& stub, const std::string& session, const std::string& save_id) {
  v1::WaitSaveRequest request;
  request.set_session_id(session);
  request.set_save_id(save_id);
  for (int i = 0; i < 30; ++i) {
    v1::WaitSaveResponse response;
    grpc::Status s =
        Rpc([&](grpc::ClientContext* c) { return stub.WaitSave(c, request, &response); });
    if (!s.ok() || response.done()) return s;
  }
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "save still in flight");
}

absl::StatusOr<std::unique_ptr<client::PoolMapping>> MapLoadMemory(
    const std::string& segment_socket, const std::string& session,
    const v1::LoadResponse& response) {
  if (response.memory_bytes() == 0) return nullptr;
  return client::PoolMapping::Open(segment_socket,
                                   segments::LoadSpaceRequest(session, response.load_id()),
                                   response.memory_bytes(), client::PoolMapping::Access::kReadOnly);
}

absl::StatusOr<char*> DeliverySource(const client::PoolMapping& pool,
                                     const client::PoolMapping* memory, const v1::Delivery& d,
                                     uint64_t i) {
  const client::PoolMapping* from = d.from_memory() ? memory : &pool;
  if (from == nullptr) return absl::InternalError("a delivery from memory, but no memory space");
  return from->Range(d.pool_offset() + i * d.src_stride(), d.length());
}

RawRank::RawRank(NodeStub& stub, const std::string& job, int rank, int world) : stub_(stub) {
  v1::AttachResponse attached;
  const grpc::Status s = AttachRaw(stub_, job, rank, world, &attached);
  INFO("attach " << job << " rank " << rank << ": " << s.error_message());
  REQUIRE(s.ok());
  session_ = attached.session_id();
  segment_socket_ = attached.segment_socket();
  absl::StatusOr<std::unique_ptr<client::PoolMapping>> pool =
      client::PoolMapping::Open(attached.segment_socket(), session_, attached.pool_bytes());
  INFO(pool.status().ToString());
  REQUIRE(pool.ok());
  pool_ = std::move(*pool);
}

RawRank::~RawRank() { (void)DetachRaw(stub_, session_); }

grpc::Status RawRank::PlanSave(int64_t step, const std::vector<RawTensor>& tensors,
                               const std::vector<RawObject>& objects, v1::PlanSaveResponse* planned,
                               bool partial) {
  v1::PlanSaveRequest request;
  request.set_session_id(session_);
  request.set_step(step);
  request.set_partial(partial);
  for (const RawTensor& t : tensors) *request.add_shards() = t.shard;
  for (const RawObject& o : objects) {
    v1::ObjectDesc* desc = request.add_objects();
    desc->set_key(o.key);
    desc->set_global(o.global);
    desc->set_length(o.bytes.size());
  }
  return Rpc([&](grpc::ClientContext* c) { return stub_.PlanSave(c, request, planned); });
}

grpc::Status RawRank::NextBatch(const std::string& save_id, v1::SaveBatch* batch) {
  v1::NextSaveBatchRequest request;
  request.set_session_id(session_);
  request.set_save_id(save_id);
  return Rpc([&](grpc::ClientContext* c) { return stub_.NextSaveBatch(c, request, batch); });
}

grpc::Status RawRank::Fill(const v1::SaveBatch& batch, const std::vector<RawTensor>& tensors,
                           const std::vector<RawObject>& objects) {
  if (absl::Status s = pool_->Refresh(batch.segment_epoch()); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, s.ToString());
  }
  for (const v1::BatchSlice& slice : batch.slices()) {
    const std::string* source = nullptr;
    if (slice.kind() == v1::SaveItem::OBJECT && slice.index() < objects.size()) {
      source = &objects[slice.index()].bytes;
    } else if (slice.kind() == v1::SaveItem::SHARD && slice.index() < tensors.size()) {
      source = &tensors[slice.index()].bytes;
    }
    absl::StatusOr<char*> to = pool_->Range(slice.pool_offset(), slice.length());
    if (source == nullptr || !to.ok() || slice.item_offset() > source->size() ||
        slice.length() > source->size() - slice.item_offset()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("daemon handed out a bad slice: ", slice.DebugString()));
    }
    std::memcpy(*to, source->data() + slice.item_offset(), slice.length());
  }
  return grpc::Status::OK;
}

grpc::Status RawRank::Submit(const std::string& save_id, uint64_t batch_id) {
  v1::SubmitSnapshotRequest request;
  request.set_session_id(session_);
  request.set_save_id(save_id);
  request.set_batch_id(batch_id);
  v1::SubmitSnapshotResponse response;
  return Rpc([&](grpc::ClientContext* c) { return stub_.SubmitSnapshot(c, request, &response); });
}

grpc::Status RawRank::Save(int64_t step, const std::vector<RawTensor>& tensors,
                           const std::vector<RawObject>& objects, bool partial) {
  v1::PlanSaveResponse planned;
  if (grpc::Status s = PlanSave(step, tensors, objects, &planned, partial); !s.ok()) return s;
  for (;;) {
    v1::SaveBatch batch;
    if (grpc::Status s = NextBatch(planned.save_id(), &batch); !s.ok()) return s;
    if (grpc::Status s = Fill(batch, tensors, objects); !s.ok()) return s;
    if (grpc::Status s = Submit(planned.save_id(), batch.batch_id()); !s.ok()) return s;
    if (batch.last()) break;
  }
  return WaitSaveRaw(stub_, session_, planned.save_id());
}

grpc::Status RawRank::Load(int64_t step, std::vector<RawTensor>& tensors,
                           std::map<std::string, std::string>& objects, int64_t* loaded) {
  v1::LoadRequest request;
  request.set_session_id(session_);
  request.set_step(step);
  for (RawTensor& t : tensors) {
    absl::StatusOr<ShardGeometry> g = ValidateShard(t.shard);
    if (!g.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, g.status().ToString());
    t.bytes.assign(static_cast<size_t>(g->bytes), '\0');
    *request.add_tensors() = t.shard;
  }
  std::vector<std::string*> outs;
  for (auto& [key, bytes] : objects) {
    request.add_object_keys(key);
    outs.push_back(&bytes);
  }
  v1::LoadResponse response;
  if (grpc::Status s =
          Rpc([&](grpc::ClientContext* c) { return stub_.Load(c, request, &response); });
      !s.ok()) {
    return s;
  }
  if (response.object_bytes_size() != static_cast<int>(outs.size())) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "object sizes do not match the keys");
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    outs[i]->assign(response.object_bytes(static_cast<int>(i)), '\0');
  }
  if (loaded != nullptr) *loaded = response.step();
  absl::StatusOr<std::unique_ptr<client::PoolMapping>> memory =
      MapLoadMemory(segment_socket_, session_, response);
  if (!memory.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, memory.status().ToString());
  uint64_t done = 0;
  for (int polls = 0; polls < 100'000; ++polls) {
    v1::NextLoadBatchRequest next;
    next.set_session_id(session_);
    next.set_load_id(response.load_id());
    next.set_done_batch_id(done);
    v1::LoadBatch batch;
    if (grpc::Status s =
            Rpc([&](grpc::ClientContext* c) { return stub_.NextLoadBatch(c, next, &batch); });
        !s.ok()) {
      return s;
    }
    done = batch.batch_id();
    if (batch.batch_id() == 0) {
      if (batch.last()) return grpc::Status::OK;
      continue;  // not read yet
    }
    if (absl::Status s = pool_->Refresh(batch.segment_epoch()); !s.ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, s.ToString());
    }
    for (const v1::Delivery& d : batch.deliveries()) {
      std::string* out = nullptr;
      if (d.target() == v1::Delivery::OBJECT && d.request() < outs.size()) out = outs[d.request()];
      if (d.target() == v1::Delivery::TENSOR && d.request() < tensors.size()) {
        out = &tensors[d.request()].bytes;
      }
      const uint64_t count = std::max<uint64_t>(d.count(), 1);
      for (uint64_t i = 0; out != nullptr && i < count; ++i) {
        const uint64_t dest = d.dest_offset() + i * d.dest_stride();
        absl::StatusOr<char*> from = DeliverySource(*pool_, memory->get(), d, i);
        if (!from.ok() || dest > out->size() || d.length() > out->size() - dest) {
          out = nullptr;
          break;
        }
        std::memcpy(out->data() + dest, *from, d.length());
      }
      if (out == nullptr) {
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            absl::StrCat("daemon sent a bad delivery: ", d.DebugString()));
      }
    }
    if (batch.last()) {
      // Release the last batch too.
      next.set_done_batch_id(done);
      v1::LoadBatch end;
      return Rpc([&](grpc::ClientContext* c) { return stub_.NextLoadBatch(c, next, &end); });
    }
  }
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "load never finished");
}

}  // namespace ckpt::testing
