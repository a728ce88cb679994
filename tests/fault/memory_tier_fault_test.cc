// The memory tier (daemon/tier/memory_tier.h) under attack, on a real ckptd
// with real rank processes and raw gRPC clients: tiers no enum names, ranks
// that disagree on the tier or go away mid-save, a save cancelled in flight,
// budgets too tight for a step, two jobs contending for one budget, a load
// whose step newer saves would evict, and a daemon SIGKILLed and restarted.
// Every refusal must be a clear gRPC error naming what to change, the
// budget must never be passed nor leak (memory_tier_bytes back to what the
// committed steps hold), and every load bit-exact.
//
// The tier's bytes are whole blocks of its store (64 KiB), so the
// tests measure what a step holds on a daemon with room to spare and size
// budgets from that, rather than assuming the backend's layout.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "client/src/pool_mapping.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/segment_handover.h"
#include "tests/catch.h"
#include "tests/support/raw_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

using grpc::StatusCode;

constexpr uint64_t kMiB = uint64_t{1} << 20;
// What a save of the demo model asks beyond what its step holds once
// committed: the commit's passing files (LATEST.next, LATEST's temporary)
// and the slack on the manifest's size, in the tier's 64 KiB blocks.
constexpr uint64_t kCommitSlack = 256 << 10;

std::string BudgetFlag(uint64_t bytes) { return absl::StrCat("--memory_tier_bytes=", bytes); }

// One float32 tensor of `rows` x 1024 (4 KiB a row) holding Pattern(seed).
std::vector<RawTensor> Model(int64_t rows, uint32_t seed) {
  std::vector<RawTensor> tensors(1);
  tensors[0].shard = Whole("w", v1::FLOAT32, {rows, 1024});
  tensors[0].bytes = Pattern(static_cast<size_t>(rows) * 4096, seed);
  return tensors;
}

// The same tensor, empty, to load into.
std::vector<RawTensor> EmptyModel(int64_t rows) {
  std::vector<RawTensor> tensors(1);
  tensors[0].shard = Whole("w", v1::FLOAT32, {rows, 1024});
  return tensors;
}

// One rank driven by raw RPCs that names the tier of each save and load
// (RawRank sends the defaults), and can stop a load half-way: the load's
// step stays pinned until it is finished or the rank goes.
class TierRank {
 public:
  TierRank(NodeStub& stub, const std::string& job, int rank = 0, int world = 1) : stub_(stub) {
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
  ~TierRank() { (void)Detach(); }
  TierRank(const TierRank&) = delete;
  TierRank& operator=(const TierRank&) = delete;

  const std::string& session() const { return session_; }
  const std::string& segment_socket() const { return segment_socket_; }

  // The rank goes away, as its process would (the daemon hears the same).
  grpc::Status Detach() {
    if (detached_) return grpc::Status::OK;
    detached_ = true;
    return DetachRaw(stub_, session_);
  }

  grpc::Status PlanSave(int64_t step, int tier, const std::vector<RawTensor>& tensors,
                        v1::PlanSaveResponse* planned) {
    v1::PlanSaveRequest request;
    request.set_session_id(session_);
    request.set_step(step);
    request.set_tier(static_cast<v1::SaveTier>(tier));
    for (const RawTensor& t : tensors) *request.add_shards() = t.shard;
    return Rpc([&](grpc::ClientContext* c) { return stub_.PlanSave(c, request, planned); });
  }

  // Copies and submits up to `max_batches` batches (all when negative);
  // *last says whether the last one went.
  grpc::Status Copy(const std::string& save_id, const std::vector<RawTensor>& tensors,
                    int max_batches = -1, bool* last = nullptr) {
    for (int n = 0; max_batches < 0 || n < max_batches; ++n) {
      v1::NextSaveBatchRequest next;
      next.set_session_id(session_);
      next.set_save_id(save_id);
      v1::SaveBatch batch;
      grpc::Status s =
          Rpc([&](grpc::ClientContext* c) { return stub_.NextSaveBatch(c, next, &batch); });
      if (!s.ok()) return s;
      if (absl::Status r = pool_->Refresh(batch.segment_epoch()); !r.ok()) {
        return grpc::Status(grpc::StatusCode::INTERNAL, r.ToString());
      }
      for (const v1::BatchSlice& slice : batch.slices()) {
        absl::StatusOr<char*> to = pool_->Range(slice.pool_offset(), slice.length());
        if (slice.kind() != v1::SaveItem::SHARD || slice.index() >= tensors.size() || !to.ok() ||
            slice.item_offset() + slice.length() > tensors[slice.index()].bytes.size()) {
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              absl::StrCat("daemon handed out a bad slice: ", slice.DebugString()));
        }
        std::memcpy(*to, tensors[slice.index()].bytes.data() + slice.item_offset(), slice.length());
      }
      v1::SubmitSnapshotRequest submit;
      submit.set_session_id(session_);
      submit.set_save_id(save_id);
      submit.set_batch_id(batch.batch_id());
      v1::SubmitSnapshotResponse submitted;
      s = Rpc([&](grpc::ClientContext* c) { return stub_.SubmitSnapshot(c, submit, &submitted); });
      if (!s.ok()) return s;
      if (batch.last()) {
        if (last != nullptr) *last = true;
        return grpc::Status::OK;
      }
    }
    if (last != nullptr) *last = false;
    return grpc::Status::OK;
  }

  grpc::Status WaitSave(const std::string& save_id) {
    return WaitSaveRaw(stub_, session_, save_id);
  }

  grpc::Status Save(int64_t step, int tier, const std::vector<RawTensor>& tensors) {
    v1::PlanSaveResponse planned;
    if (grpc::Status s = PlanSave(step, tier, tensors, &planned); !s.ok()) return s;
    if (grpc::Status s = Copy(planned.save_id(), tensors); !s.ok()) return s;
    return WaitSave(planned.save_id());
  }

  // Plans a load: the step is pinned from here on. Sizes the tensors.
  grpc::Status StartLoad(int64_t step, int tier, std::vector<RawTensor>& tensors,
                         v1::LoadResponse* response) {
    v1::LoadRequest request;
    request.set_session_id(session_);
    request.set_step(step);
    request.set_tier(static_cast<v1::LoadTier>(tier));
    for (RawTensor& t : tensors) {
      absl::StatusOr<ShardGeometry> g = ValidateShard(t.shard);
      if (!g.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, g.status().ToString());
      t.bytes.assign(static_cast<size_t>(g->bytes), '\0');
      *request.add_tensors() = t.shard;
    }
    load_done_ = 0;
    memory_.reset();
    grpc::Status s = Rpc([&](grpc::ClientContext* c) { return stub_.Load(c, request, response); });
    if (!s.ok()) return s;
    absl::StatusOr<std::unique_ptr<client::PoolMapping>> memory =
        MapLoadMemory(segment_socket_, session_, *response);
    if (!memory.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, memory.status().ToString());
    memory_ = *std::move(memory);
    return s;
  }

  // Follows up to `max_batches` deliveries of the load (all when negative);
  // *finished says whether the load is complete.
  grpc::Status PumpLoad(const v1::LoadResponse& response, std::vector<RawTensor>& tensors,
                        int max_batches, bool* finished, v1::LoadBatch* last_batch = nullptr) {
    *finished = false;
    int copied = 0;
    for (int polls = 0; polls < 100'000; ++polls) {
      if (max_batches >= 0 && copied >= max_batches) return grpc::Status::OK;
      v1::NextLoadBatchRequest next;
      next.set_session_id(session_);
      next.set_load_id(response.load_id());
      next.set_done_batch_id(load_done_);
      v1::LoadBatch batch;
      grpc::Status s =
          Rpc([&](grpc::ClientContext* c) { return stub_.NextLoadBatch(c, next, &batch); });
      if (!s.ok()) return s;
      load_done_ = batch.batch_id();
      if (batch.batch_id() == 0) {
        if (batch.last()) {
          *finished = true;
          if (last_batch != nullptr) *last_batch = batch;
          return grpc::Status::OK;
        }
        continue;  // not read yet
      }
      if (absl::Status r = pool_->Refresh(batch.segment_epoch()); !r.ok()) {
        return grpc::Status(grpc::StatusCode::INTERNAL, r.ToString());
      }
      for (const v1::Delivery& d : batch.deliveries()) {
        std::string* out = d.target() == v1::Delivery::TENSOR && d.request() < tensors.size()
                               ? &tensors[d.request()].bytes
                               : nullptr;
        const uint64_t count = std::max<uint64_t>(d.count(), 1);
        for (uint64_t i = 0; out != nullptr && i < count; ++i) {
          const uint64_t dest = d.dest_offset() + i * d.dest_stride();
          absl::StatusOr<char*> from = DeliverySource(*pool_, memory_.get(), d, i);
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
      ++copied;
      if (batch.last()) {
        if (last_batch != nullptr) *last_batch = batch;
        next.set_done_batch_id(load_done_);
        v1::LoadBatch end;
        *finished = true;
        return Rpc([&](grpc::ClientContext* c) { return stub_.NextLoadBatch(c, next, &end); });
      }
    }
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "load never finished");
  }

  // One NextLoadBatch of the load, releasing batch `done` (0: none).
  grpc::Status NextBatch(const v1::LoadResponse& response, uint64_t done, v1::LoadBatch* batch) {
    v1::NextLoadBatchRequest next;
    next.set_session_id(session_);
    next.set_load_id(response.load_id());
    next.set_done_batch_id(done);
    return Rpc([&](grpc::ClientContext* c) { return stub_.NextLoadBatch(c, next, batch); });
  }

  // A whole load; *step and *tiers say what it read.
  grpc::Status Load(int64_t step, int tier, std::vector<RawTensor>& tensors, int64_t* loaded,
                    std::string* tiers = nullptr) {
    v1::LoadResponse response;
    if (grpc::Status s = StartLoad(step, tier, tensors, &response); !s.ok()) return s;
    *loaded = response.step();
    bool finished = false;
    v1::LoadBatch last;
    grpc::Status s = PumpLoad(response, tensors, -1, &finished, &last);
    if (tiers != nullptr) tiers->assign(absl::StrJoin(last.tiers(), "+"));
    return s;
  }

 private:
  NodeStub& stub_;
  std::string session_;
  std::string segment_socket_;
  std::unique_ptr<client::PoolMapping> pool_;
  std::unique_ptr<client::PoolMapping> memory_;  // the load's memory space, if any
  bool detached_ = false;
  uint64_t load_done_ = 0;
};

void RequireAllOk(const std::vector<ExitInfo>& ranks) {
  for (const ExitInfo& r : ranks) {
    INFO(r.output);
    REQUIRE(r.ok());
  }
}

bool AllOk(const std::vector<ExitInfo>& ranks) {
  for (const ExitInfo& r : ranks) {
    if (!r.ok()) return false;
  }
  return true;
}

// A memory-tier refusal an operator can act on: RESOURCE_EXHAUSTED naming
// the flag that sizes the tier.
bool NamedRefusal(const std::string& output) {
  return absl::StrContains(output, "RESOURCE_EXHAUSTED") &&
         absl::StrContains(output, "--memory_tier_bytes");
}

// No save in flight, nothing of a save held in the pool.
bool Quiet(const v1::GetStatusResponse& s) {
  return s.saves_size() == 0 && s.loads_in_flight() == 0 && s.pool_used_bytes() == 0;
}

// Committed memory steps of `job` per GetStatus.
std::vector<int64_t> MemorySteps(const v1::GetStatusResponse& s, const std::string& job) {
  for (const v1::MemoryTierJob& j : s.memory_tier_jobs()) {
    if (j.job() == job) return {j.steps().begin(), j.steps().end()};
  }
  return {};
}

// What one committed demo step (world 1, scale 1) holds in the memory
// tier, measured on a daemon with room to spare.
uint64_t DemoStepBytes() {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(256 * kMiB)}).ok());
  RequireAllOk(d.RunRanks("measure", "save", 1, 1, 1, 0, {"--tier=memory"}));
  const uint64_t held = d.Status().memory_tier_bytes();
  REQUIRE(held > 0);
  return held;
}

}  // namespace

TEST_CASE("tiers no enum names are refused by name; the daemon serves on",
          "[memory_tier_fault][hostile]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB)}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  TierRank rank(*stub, "tiers");
  const std::vector<RawTensor> model = Model(16, 1);
  for (int tier : {99, -5, 3, 1 << 30}) {
    v1::PlanSaveResponse planned;
    const grpc::Status s = rank.PlanSave(1, tier, model, &planned);
    INFO("save tier " << tier);
    CheckError(s, StatusCode::INVALID_ARGUMENT, absl::StrCat("tier ", tier, " is unknown"));
  }
  for (int tier : {7, -1, 3}) {
    std::vector<RawTensor> into = EmptyModel(16);
    v1::LoadResponse response;
    INFO("load tier " << tier);
    CheckError(rank.StartLoad(-1, tier, into, &response), StatusCode::INVALID_ARGUMENT,
               absl::StrCat("load tier ", tier, " is unknown"));
  }
  // A step far beyond the budget is refused before anything is held.
  {
    std::vector<RawTensor> huge(1);
    huge[0].shard = Whole("w", v1::FLOAT32, {int64_t{1} << 19, 1024});  // 2 GiB
    v1::PlanSaveResponse planned;
    const grpc::Status s = rank.PlanSave(1, v1::SAVE_TIER_MEMORY, huge, &planned);
    CheckError(s, StatusCode::RESOURCE_EXHAUSTED, "--memory_tier_bytes");
  }
  REQUIRE(d.Running());
  // Nothing of the refused saves is left, and the same step saves and
  // loads bit-exact from memory.
  const v1::GetStatusResponse after = d.Status();
  CHECK(after.saves_size() == 0);
  CHECK(after.memory_tier_bytes() == 0);
  REQUIRE(rank.Save(1, v1::SAVE_TIER_MEMORY, model).ok());
  std::vector<RawTensor> into = EmptyModel(16);
  int64_t loaded = -1;
  std::string tiers;
  REQUIRE(rank.Load(-1, v1::LOAD_TIER_MEMORY, into, &loaded, &tiers).ok());
  CHECK(loaded == 1);
  CHECK(tiers == "memory");
  CHECK(into[0].bytes == model[0].bytes);
}

TEST_CASE("memory tier flags out of range stop ckptd with a clear message",
          "[memory_tier_fault][flags]") {
  for (const std::string flag : {"--memory_tier_keep_steps=0", "--memory_tier_keep_steps=-3"}) {
    TestDaemon d;
    const absl::Status started = d.Start({BudgetFlag(64 * kMiB), flag});
    INFO(flag << ": " << started.ToString() << "\n" << d.Output());
    CHECK_FALSE(started.ok());
    CHECK(absl::StrContains(d.Output() + started.ToString(), "--memory_tier_keep_steps"));
  }
  TestDaemon d;
  const absl::Status started = d.Start({"--memory_tier_bytes=-1"});
  INFO(started.ToString() << "\n" << d.Output());
  CHECK_FALSE(started.ok());
  // A budget smaller than one block: every memory save refused by name.
  TestDaemon tiny;
  REQUIRE(tiny.Start({BudgetFlag(1)}).ok());
  for (const ExitInfo& r : tiny.RunRanks("tiny", "save", 1, 1, 1, 0, {"--tier=memory"})) {
    INFO(r.output);
    CHECK(NamedRefusal(r.output));
  }
  CHECK(tiny.Status().memory_tier_bytes() == 0);
}

TEST_CASE("--memory_tier_keep_steps=2 keeps the newest two steps, each loadable by number",
          "[memory_tier_fault][retention]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB), "--memory_tier_keep_steps=2"}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  TierRank rank(*stub, "keep2");
  for (int64_t step = 1; step <= 5; ++step) {
    REQUIRE(rank.Save(step, v1::SAVE_TIER_MEMORY, Model(256, 400 + step)).ok());
  }
  // Retention runs after each commit on a thread of its own (the save does
  // not wait for it): polled, with a bound.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (MemorySteps(d.Status(), "keep2") != std::vector<int64_t>{4, 5} && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  CHECK(MemorySteps(d.Status(), "keep2") == std::vector<int64_t>{4, 5});
  for (int64_t step : {4, 5}) {
    std::vector<RawTensor> into = EmptyModel(256);
    int64_t loaded = -1;
    REQUIRE(rank.Load(step, v1::LOAD_TIER_MEMORY, into, &loaded).ok());
    CHECK(loaded == step);
    CHECK(into[0].bytes == Model(256, 400 + step)[0].bytes);
  }
  std::vector<RawTensor> into = EmptyModel(256);
  int64_t loaded = -1;
  const grpc::Status gone = rank.Load(3, v1::LOAD_TIER_MEMORY, into, &loaded);
  CheckError(gone, StatusCode::NOT_FOUND, "memory tier");
}

TEST_CASE("ranks of one save that disagree on the tier get a clear FAILED_PRECONDITION",
          "[memory_tier_fault][hostile]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB)}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  TierRank r0(*stub, "split", 0, 2);
  TierRank r1(*stub, "split", 1, 2);
  // Each rank saves its half of the rows.
  std::vector<RawTensor> half0(1), half1(1);
  const std::string whole = Pattern(64 * 4096, 5);
  half0[0].shard = Boxed("w", v1::FLOAT32, {64, 1024}, {0, 0}, {32, 1024});
  half0[0].bytes = whole.substr(0, 32 * 4096);
  half1[0].shard = Boxed("w", v1::FLOAT32, {64, 1024}, {32, 0}, {32, 1024});
  half1[0].bytes = whole.substr(32 * 4096);

  grpc::Status s0;
  v1::PlanSaveResponse planned0;
  std::thread first([&] { s0 = r0.PlanSave(3, v1::SAVE_TIER_MEMORY, half0, &planned0); });
  // Rank 0's plan is in: the save's tier is memory.
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.saves_size() == 1; }));
  for (int tier : {int{v1::SAVE_TIER_DURABLE}, int{v1::SAVE_TIER_MEMORY_AND_DURABLE}}) {
    v1::PlanSaveResponse planned1;
    const grpc::Status s = r1.PlanSave(3, tier, half1, &planned1);
    INFO("rank 1 tier " << tier);
    CheckError(s, StatusCode::FAILED_PRECONDITION, "the save's first rank asked for memory");
    CHECK_THAT(s.error_message(), Catch::Contains("rank 1"));
  }
  // The refused rank may still join with the save's tier.
  v1::PlanSaveResponse planned1;
  const grpc::Status s1 = r1.PlanSave(3, v1::SAVE_TIER_MEMORY, half1, &planned1);
  first.join();
  INFO(s0.error_message() << " / " << s1.error_message());
  REQUIRE(s0.ok());
  REQUIRE(s1.ok());
  grpc::Status c0, c1;
  std::thread copy0([&] {
    c0 = r0.Copy(planned0.save_id(), half0);
    if (c0.ok()) c0 = r0.WaitSave(planned0.save_id());
  });
  c1 = r1.Copy(planned1.save_id(), half1);
  if (c1.ok()) c1 = r1.WaitSave(planned1.save_id());
  copy0.join();
  INFO(c0.error_message() << " / " << c1.error_message());
  REQUIRE(c0.ok());
  REQUIRE(c1.ok());
  CHECK(d.Status().storage_bytes_written() == 0);  // memory only
  // One rank loads the whole tensor back from memory.
  r1.Detach();
  r0.Detach();
  TierRank reader(*stub, "split");
  std::vector<RawTensor> into = EmptyModel(64);
  int64_t loaded = -1;
  std::string tiers;
  REQUIRE(reader.Load(3, v1::LOAD_TIER_ANY, into, &loaded, &tiers).ok());
  CHECK(tiers == "memory");
  CHECK(into[0].bytes == whole);
}

TEST_CASE("a rank gone in the middle of a memory-tier save leaks none of the budget",
          "[memory_tier_fault][liveness]") {
  TestDaemon d;
  // Small save batches: the save takes several, so it is caught half-written.
  REQUIRE(d.Start({BudgetFlag(64 * kMiB), "--save_batch_bytes=1048576"}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  // Another job's step, which must survive all of this.
  RequireAllOk(d.RunRanks("bystander", "save", 1, 1, 1, 0, {"--tier=memory"}));
  const uint64_t before = d.Status().memory_tier_bytes();
  REQUIRE(before > 0);

  const std::string whole = Pattern(2048 * 4096, 9);  // 8 MiB
  std::vector<RawTensor> half0(1), half1(1);
  half0[0].shard = Boxed("w", v1::FLOAT32, {2048, 1024}, {0, 0}, {1024, 1024});
  half0[0].bytes = whole.substr(0, 1024 * 4096);
  half1[0].shard = Boxed("w", v1::FLOAT32, {2048, 1024}, {1024, 0}, {1024, 1024});
  half1[0].bytes = whole.substr(1024 * 4096);
  {
    TierRank r0(*stub, "dead", 0, 2);
    TierRank r1(*stub, "dead", 1, 2);
    grpc::Status s0, s1;
    v1::PlanSaveResponse planned0, planned1;
    std::thread plan0([&] { s0 = r0.PlanSave(7, v1::SAVE_TIER_MEMORY, half0, &planned0); });
    s1 = r1.PlanSave(7, v1::SAVE_TIER_MEMORY, half1, &planned1);
    plan0.join();
    REQUIRE(s0.ok());
    REQUIRE(s1.ok());
    // Rank 0 copies all of its half; rank 1 one batch of its own, then dies.
    REQUIRE(r0.Copy(planned0.save_id(), half0).ok());
    bool last = false;
    REQUIRE(r1.Copy(planned1.save_id(), half1, 1, &last).ok());
    REQUIRE_FALSE(last);
    // The tier holds some of the step now.
    REQUIRE(AwaitStatus(
        d, [&](const v1::GetStatusResponse& s) { return s.memory_tier_bytes() > before; }));
    REQUIRE(r1.Detach().ok());
    const grpc::Status waited = r0.WaitSave(planned0.save_id());
    INFO(waited.error_message());
    CHECK_FALSE(waited.ok());
    CHECK_THAT(waited.error_message(), Catch::Contains("rank 1 went away"));
  }
  // The aborted step's blocks are back in the budget; nothing is listed.
  REQUIRE(AwaitStatus(d, [&](const v1::GetStatusResponse& s) {
    return Quiet(s) && s.memory_tier_bytes() == before;
  }));
  CHECK(MemorySteps(d.Status(), "dead").empty());
  CHECK(MemorySteps(d.Status(), "bystander") == std::vector<int64_t>{1});
  // The same step saves again and loads back bit-exact.
  {
    TierRank r0(*stub, "dead", 0, 2);
    TierRank r1(*stub, "dead", 1, 2);
    grpc::Status s0, s1;
    std::thread save0([&] { s0 = r0.Save(7, v1::SAVE_TIER_MEMORY, half0); });
    s1 = r1.Save(7, v1::SAVE_TIER_MEMORY, half1);
    save0.join();
    INFO(s0.error_message() << " / " << s1.error_message());
    REQUIRE(s0.ok());
    REQUIRE(s1.ok());
  }
  TierRank reader(*stub, "dead");
  std::vector<RawTensor> into = EmptyModel(2048);
  int64_t loaded = -1;
  REQUIRE(reader.Load(7, v1::LOAD_TIER_MEMORY, into, &loaded).ok());
  CHECK(into[0].bytes == whole);
  for (const ExitInfo& r : d.RunRanks("bystander", "load", 1, 1, 1, 1, {"--from=memory"})) {
    INFO(r.output);
    CHECK(r.ok());
  }
  CHECK(d.Running());
}

TEST_CASE("a real rank SIGKILLed in a memory-tier save: aborted, nothing held, saves again",
          "[memory_tier_fault][liveness]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB)}).ok());
  // Rank 1 attaches and hangs; rank 0 plans its memory save and waits.
  auto hanging = d.StartRank("killed", "attach", 1, 2, 1);
  REQUIRE(hanging->WaitForOutput("attached", absl::Seconds(30)));
  auto survivor = d.StartRank("killed", "save", 0, 2, 4, 0, 1, {"--tier=memory"});
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) {
    return s.attached_ranks() == 2 && s.saves_size() == 1;
  }));
  hanging->Signal(SIGKILL);
  const ExitInfo exit = survivor->Wait();
  INFO(exit.output);
  CHECK_FALSE(exit.ok());
  CHECK(absl::StrContains(exit.output, "rank 1 went away"));
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) {
    return Quiet(s) && s.attached_ranks() == 0 && s.memory_tier_bytes() == 0;
  }));
  RequireAllOk(d.RunRanks("killed", "save", 2, 4, 1, 0, {"--tier=memory"}));
  for (const ExitInfo& r : d.RunRanks("killed", "load", 2, 4, 1, 2, {"--from=memory"})) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(absl::StrContains(r.output, "tiers=memory"));
  }
}

TEST_CASE("a memory-tier save cancelled in flight gives back what it held",
          "[memory_tier_fault][cancel]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB), "--save_batch_bytes=1048576"}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  const std::vector<RawTensor> model = Model(2048, 21);  // 8 MiB: several batches
  TierRank rank(*stub, "cancel");
  v1::PlanSaveResponse planned;
  REQUIRE(rank.PlanSave(2, v1::SAVE_TIER_MEMORY, model, &planned).ok());
  bool last = false;
  REQUIRE(rank.Copy(planned.save_id(), model, 2, &last).ok());
  REQUIRE_FALSE(last);
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_tier_bytes() > 0; }));
  const ExitInfo cancel = d.Ckptctl({"cancel", "cancel", "2"});
  INFO(cancel.output);
  REQUIRE(cancel.ok());
  CHECK(absl::StrContains(cancel.output, "cancelled job cancel step 2"));
  const grpc::Status waited = rank.WaitSave(planned.save_id());
  INFO(waited.error_message());
  CHECK(waited.error_code() == StatusCode::CANCELLED);
  CHECK_THAT(waited.error_message(), Catch::Contains("cancelled by operator"));
  REQUIRE(AwaitStatus(
      d, [](const v1::GetStatusResponse& s) { return Quiet(s) && s.memory_tier_bytes() == 0; }));
  CHECK(MemorySteps(d.Status(), "cancel").empty());
  // Cancelling again: nothing in flight, said so.
  const ExitInfo again = d.Ckptctl({"cancel", "cancel", "2"});
  CHECK_FALSE(again.ok());
  CHECK(absl::StrContains(again.output, "no save of job cancel step 2 is in flight"));
  // The step saves again and loads bit-exact.
  REQUIRE(rank.Save(2, v1::SAVE_TIER_MEMORY, model).ok());
  std::vector<RawTensor> into = EmptyModel(2048);
  int64_t loaded = -1;
  REQUIRE(rank.Load(2, v1::LOAD_TIER_MEMORY, into, &loaded).ok());
  CHECK(into[0].bytes == model[0].bytes);
}

// The commit's small files (MANIFEST, LATEST.next, LATEST's temporary)
// take blocks too, beyond the data's, some only while it commits. A budget
// with room for the data but not for those must be refused up front by
// name, or hold; one with the commit's room (kCommitSlack) must hold.
TEST_CASE("a budget one block short of a step: refused by name, or the save fits; nothing leaks",
          "[memory_tier_fault][budget]") {
  const uint64_t step_bytes = DemoStepBytes();
  INFO("a demo step holds " << step_bytes << " bytes in the memory tier");
  for (uint64_t budget = step_bytes - kMiB; budget <= step_bytes + kCommitSlack;
       budget += kMiB / 4) {
    TestDaemon d;
    REQUIRE(d.Start({BudgetFlag(budget)}).ok());
    const std::vector<ExitInfo> saved = d.RunRanks("tight", "save", 1, 1, 1, 0, {"--tier=memory"});
    INFO("budget " << budget << ": " << saved[0].output);
    if (budget >= step_bytes + kCommitSlack) CHECK(saved[0].ok());
    if (!saved[0].ok()) {
      // Found here once: the commit's files were outside the room asked
      // for, so the save was admitted, written, then failed at commit with
      // the store's "write /memory/tight/LATEST.next ..." naming no flag.
      CHECK(NamedRefusal(saved[0].output));
    }
    REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return Quiet(s); }));
    const v1::GetStatusResponse status = d.Status();
    CHECK(status.memory_tier_bytes() <= budget);
    CHECK(status.memory_tier_bytes() == (saved[0].ok() ? step_bytes : 0));
    CHECK(d.Running());
  }
}

TEST_CASE("two jobs taking turns under a budget of three steps: every newest step loads",
          "[memory_tier_fault][budget]") {
  const uint64_t step_bytes = DemoStepBytes();
  const uint64_t budget = 3 * step_bytes + kCommitSlack;
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(budget)}).ok());
  std::map<std::string, int64_t> newest;
  for (int64_t step = 1; step <= 5; ++step) {
    for (const std::string job : {"alpha", "beta"}) {
      const std::vector<ExitInfo> saved = d.RunRanks(job, "save", 1, step, 1, 0, {"--tier=memory"});
      INFO(job << " step " << step << ": " << saved[0].output);
      // Each job keeps one step besides the one it writes: three fit.
      // Found here once: alpha's commit found no block for LATEST's
      // temporary, LATEST.next stayed behind, and from then on every save
      // of beta failed at commit naming no flag.
      CHECK(saved[0].ok());
      if (saved[0].ok()) newest[job] = step;
      if (!saved[0].ok()) CHECK(NamedRefusal(saved[0].output));
      const v1::GetStatusResponse status = d.Status();
      CHECK(status.memory_tier_bytes() <= budget);
      for (const auto& [j, s] : newest) {
        const std::vector<int64_t> steps = MemorySteps(status, j);
        CHECK(!steps.empty());
        if (!steps.empty()) CHECK(steps.back() == s);
      }
    }
    for (const auto& [job, s] : newest) {
      for (const ExitInfo& r : d.RunRanks(job, "load", 1, -1, 1, 1, {"--from=memory"})) {
        INFO(r.output);
        CHECK(r.ok());
        CHECK(absl::StrContains(r.output, absl::StrCat("loaded step ", s, ":")));
      }
    }
  }
  CHECK_FALSE(absl::StrContains(d.Output(), "LATEST could not be written"));
  // Leak check: what is held is exactly what the listed steps take (a job's
  // LATEST is part of its first step's measure).
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return Quiet(s); }));
  const v1::GetStatusResponse status = d.Status();
  uint64_t steps = 0;
  for (const v1::MemoryTierJob& j : status.memory_tier_jobs()) steps += j.steps_size();
  CHECK(status.memory_tier_bytes() == steps * step_bytes);
  CHECK(d.Running());
}

TEST_CASE("two jobs saving to memory at once under a tight budget: refusals are named",
          "[memory_tier_fault][budget]") {
  const uint64_t step_bytes = DemoStepBytes();
  // Room for each job's newest step and one more being written, with a
  // block to spare for the commit's small files: either job alone always
  // fits (checked first); when both write at once, one must be refused.
  const uint64_t budget = 3 * step_bytes + kMiB;
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(budget)}).ok());
  for (int64_t step = 1; step <= 2; ++step) {
    RequireAllOk(d.RunRanks("left", "save", 1, step, 1, 0, {"--tier=memory"}));
    RequireAllOk(d.RunRanks("right", "save", 1, step, 1, 0, {"--tier=memory"}));
  }
  std::map<std::string, int64_t> newest = {{"left", 2}, {"right", 2}};
  int refused = 0, unnamed = 0;
  for (int64_t step = 3; step <= 10; ++step) {
    std::vector<ExitInfo> left, right;
    std::thread other([&] { left = d.RunRanks("left", "save", 1, step, 1, 0, {"--tier=memory"}); });
    right = d.RunRanks("right", "save", 1, step, 1, 0, {"--tier=memory"});
    other.join();
    const std::vector<std::pair<std::string, std::vector<ExitInfo>*>> outcomes = {
        {"left", &left}, {"right", &right}};
    for (const auto& [job, out] : outcomes) {
      if (AllOk(*out)) {
        newest[job] = step;
        continue;
      }
      ++refused;
      for (const ExitInfo& r : *out) {
        if (r.ok()) continue;
        INFO(job << " step " << step << ": " << r.output);
        // Found here once: room was checked, not reserved, so two saves
        // were both admitted and the one that ran out failed mid-write or
        // at commit with the store's error, naming no flag.
        CHECK(NamedRefusal(r.output));
        if (!NamedRefusal(r.output)) ++unnamed;
      }
    }
    REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return Quiet(s); }));
    const v1::GetStatusResponse status = d.Status();
    CHECK(status.memory_tier_bytes() <= budget);
    for (const auto& [job, s] : newest) {
      const std::vector<int64_t> steps = MemorySteps(status, job);
      CHECK(!steps.empty());
      if (!steps.empty()) CHECK(steps.back() == s);
    }
  }
  INFO(refused << " saves refused, " << unnamed << " without naming the flag");
  // Every job's newest committed step loads bit-exact, resharded.
  for (const auto& [job, s] : newest) {
    for (const ExitInfo& r : d.RunRanks(job, "load", 2, -1, 1, 1, {"--from=memory"})) {
      INFO(r.output);
      CHECK(r.ok());
      CHECK(absl::StrContains(r.output, absl::StrCat("loaded step ", s, ":")));
    }
  }
  CHECK(d.Running());
}

// Halves of a `rows` x 1024 float32 tensor of Pattern(seed), for two ranks.
std::vector<std::vector<RawTensor>> Halves(int64_t rows, uint32_t seed) {
  const std::string whole = Pattern(static_cast<size_t>(rows) * 4096, seed);
  std::vector<std::vector<RawTensor>> halves(2, std::vector<RawTensor>(1));
  for (int r = 0; r < 2; ++r) {
    halves[r][0].shard = Boxed("w", v1::FLOAT32, {rows, 1024}, {r * rows / 2, 0}, {rows / 2, 1024});
    halves[r][0].bytes = whole.substr(r * rows / 2 * 4096, rows / 2 * 4096);
  }
  return halves;
}

// Both ranks of a world-2 job plan `step` (rank 0 on a thread: PlanSave
// returns once both planned, after the tier made room).
void PlanBoth(TierRank& r0, TierRank& r1, int64_t step,
              const std::vector<std::vector<RawTensor>>& halves, v1::PlanSaveResponse planned[2],
              grpc::Status status[2]) {
  std::thread first(
      [&] { status[0] = r0.PlanSave(step, v1::SAVE_TIER_MEMORY, halves[0], &planned[0]); });
  status[1] = r1.PlanSave(step, v1::SAVE_TIER_MEMORY, halves[1], &planned[1]);
  first.join();
}

TEST_CASE("two memory saves admitted at once must both fit, or the second is refused at plan",
          "[memory_tier_fault][budget]") {
  constexpr int64_t kRows = 1024;  // 4 MiB a step
  // What one step of this model holds (with its job's LATEST).
  uint64_t step_bytes = 0;
  {
    TestDaemon measure;
    REQUIRE(measure.Start({BudgetFlag(256 * kMiB)}).ok());
    std::unique_ptr<NodeStub> stub = measure.Stub();
    TierRank r0(*stub, "measure", 0, 2), r1(*stub, "measure", 1, 2);
    const auto halves = Halves(kRows, 1);
    v1::PlanSaveResponse planned[2];
    grpc::Status status[2];
    PlanBoth(r0, r1, 1, halves, planned, status);
    REQUIRE(status[0].ok());
    REQUIRE(status[1].ok());
    REQUIRE(r0.Copy(planned[0].save_id(), halves[0]).ok());
    REQUIRE(r1.Copy(planned[1].save_id(), halves[1]).ok());
    REQUIRE(r0.WaitSave(planned[0].save_id()).ok());
    step_bytes = measure.Status().memory_tier_bytes();
  }
  // Each job's newest step, and room for one more save with a block to
  // spare for the commit's small files: one at a time, saves fit (checked
  // below); two at once do not.
  const uint64_t budget = 3 * step_bytes + kMiB;
  INFO("a step holds " << step_bytes << "; budget " << budget);
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(budget)}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  TierRank a0(*stub, "left", 0, 2), a1(*stub, "left", 1, 2);
  TierRank b0(*stub, "right", 0, 2), b1(*stub, "right", 1, 2);
  auto save = [&](TierRank& r0, TierRank& r1, int64_t step, uint32_t seed) {
    const auto halves = Halves(kRows, seed);
    v1::PlanSaveResponse planned[2];
    grpc::Status status[2];
    PlanBoth(r0, r1, step, halves, planned, status);
    if (!status[0].ok()) return status[0];
    if (!status[1].ok()) return status[1];
    if (grpc::Status s = r0.Copy(planned[0].save_id(), halves[0]); !s.ok()) return s;
    if (grpc::Status s = r1.Copy(planned[1].save_id(), halves[1]); !s.ok()) return s;
    return r0.WaitSave(planned[0].save_id());
  };
  for (int64_t step = 1; step <= 2; ++step) {
    REQUIRE(save(a0, a1, step, 10 + step).ok());
    REQUIRE(save(b0, b1, step, 20 + step).ok());
  }
  // Both jobs plan step 3, so the tier made room for both; then each job's
  // rank 0 writes its half, and only then rank 1: both are in memory at
  // once before either commits.
  const auto left3 = Halves(kRows, 13), right3 = Halves(kRows, 23);
  v1::PlanSaveResponse pl[2], pr[2];
  grpc::Status sl[2], sr[2];
  PlanBoth(a0, a1, 3, left3, pl, sl);
  PlanBoth(b0, b1, 3, right3, pr, sr);
  INFO("left plan: " << sl[0].error_message() << "; right plan: " << sr[0].error_message());
  REQUIRE(sl[0].ok());
  // Found here once: the second plan was admitted against the bytes held
  // then, not counting the first save's still to come (now reserved).
  CHECK_FALSE(sr[0].ok());
  const uint64_t held = d.Status().memory_tier_bytes();
  grpc::Status left = a0.Copy(pl[0].save_id(), left3[0]);
  grpc::Status right = sr[0].ok() ? b0.Copy(pr[0].save_id(), right3[0]) : sr[0];
  // Both first halves are in memory before the left save can commit.
  if (left.ok() && right.ok()) {
    CHECK(AwaitStatus(d, [&](const v1::GetStatusResponse& s) {
      return s.memory_tier_bytes() >= held + kRows / 2 * 4096 * 2;
    }));
  }
  if (left.ok()) left = a1.Copy(pl[1].save_id(), left3[1]);
  if (right.ok()) right = b1.Copy(pr[1].save_id(), right3[1]);
  if (left.ok()) left = a0.WaitSave(pl[0].save_id());
  if (right.ok()) right = b0.WaitSave(pr[0].save_id());
  INFO("left: " << left.error_message() << "\nright: " << right.error_message());
  CHECK((left.ok() || right.ok()));
  for (const grpc::Status* s : {&left, &right}) {
    if (s->ok()) continue;
    CHECK(s->error_code() == StatusCode::RESOURCE_EXHAUSTED);
    CHECK_THAT(s->error_message(), Catch::Contains("--memory_tier_bytes"));
  }
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return Quiet(s); }));
  CHECK(d.Status().memory_tier_bytes() <= budget);
  CHECK(d.Running());
}

TEST_CASE("a memory step being loaded is pinned: newer saves never evict it mid-load",
          "[memory_tier_fault][pin]") {
  TestDaemon d;
  // 1 MiB read-ahead: the load reads its 8 MiB step a piece at a time,
  // after the saves below.
  const uint64_t budget = 24 * kMiB;
  REQUIRE(d.Start({BudgetFlag(budget), "--batch_bytes=1048576"}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  TierRank trainer(*stub, "pinned");
  const std::vector<RawTensor> step1 = Model(2048, 101);
  REQUIRE(trainer.Save(1, v1::SAVE_TIER_MEMORY, step1).ok());
  const uint64_t one_step = d.Status().memory_tier_bytes();
  INFO("one step holds " << one_step);
  REQUIRE(2 * one_step <= budget);
  REQUIRE(3 * one_step > budget);

  // The trainer's load of step 1 starts and takes one batch...
  std::vector<RawTensor> into = EmptyModel(2048);
  v1::LoadResponse response;
  REQUIRE(trainer.StartLoad(1, v1::LOAD_TIER_MEMORY, into, &response).ok());
  CHECK(response.tier() == "memory");
  bool finished = false;
  REQUIRE(trainer.PumpLoad(response, into, 1, &finished).ok());
  REQUIRE_FALSE(finished);

  // ...while the trainer saves on: step 2 fits beside the pinned step 1,
  // whose retention must wait; step 3 finds no room (1 is pinned, 2 is the
  // newest) and is refused by name.
  const std::vector<RawTensor> step2 = Model(2048, 102);
  const std::vector<RawTensor> step3 = Model(2048, 103);
  const grpc::Status saved2 = trainer.Save(2, v1::SAVE_TIER_MEMORY, step2);
  INFO(saved2.error_message());
  CHECK(saved2.ok());
  const grpc::Status saved3 = trainer.Save(3, v1::SAVE_TIER_MEMORY, step3);
  INFO(saved3.error_message());
  CHECK(saved3.error_code() == StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(saved3.error_message(), Catch::Contains("--memory_tier_bytes"));
  CHECK(d.Status().memory_tier_bytes() <= budget);

  // The load completes with step 1's bytes, not a mix.
  v1::LoadBatch last;
  REQUIRE(trainer.PumpLoad(response, into, -1, &finished, &last).ok());
  REQUIRE(finished);
  CHECK(absl::StrJoin(last.tiers(), "+") == "memory");
  CHECK(into[0].bytes == step1[0].bytes);

  // The load's end unpins step 1: step 3 now fits (1 goes).
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return Quiet(s); }));
  const grpc::Status again = trainer.Save(3, v1::SAVE_TIER_MEMORY, step3);
  INFO(again.error_message());
  REQUIRE(again.ok());
  CHECK(d.Status().memory_tier_bytes() <= budget);
  CHECK(MemorySteps(d.Status(), "pinned").back() == 3);
  std::vector<RawTensor> back = EmptyModel(2048);
  int64_t loaded = -1;
  REQUIRE(trainer.Load(-1, v1::LOAD_TIER_ANY, back, &loaded).ok());
  CHECK(loaded == 3);
  CHECK(back[0].bytes == step3[0].bytes);
}

TEST_CASE("a load's memory files go read-only to its own job's ranks only, while it runs",
          "[memory_tier_fault][zero_copy]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB), "--batch_bytes=1048576"}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  TierRank owner(*stub, "owner");
  TierRank stranger(*stub, "stranger");
  const std::vector<RawTensor> saved = Model(2048, 7);  // 8 MiB
  REQUIRE(owner.Save(1, v1::SAVE_TIER_MEMORY, saved).ok());

  std::vector<RawTensor> into = EmptyModel(2048);
  v1::LoadResponse response;
  REQUIRE(owner.StartLoad(1, v1::LOAD_TIER_MEMORY, into, &response).ok());
  REQUIRE(response.memory_bytes() >= saved[0].bytes.size());
  const std::string socket = owner.segment_socket();
  const std::string request = segments::LoadSpaceRequest(owner.session(), response.load_id());

  // The owner's rank gets the files, and can neither write them, map them
  // writable, nor shrink them under the daemon.
  absl::StatusOr<segments::SegmentTable> table =
      segments::FetchSegmentTable(socket, request, response.memory_bytes(), absl::Seconds(10));
  INFO(table.status().ToString());
  REQUIRE(table.ok());
  REQUIRE_FALSE(table->segments.empty());
  for (const segments::ReceivedSegment& file : table->segments) {
    const int fd = file.fd.get();
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
    CHECK(mmap(nullptr, file.range.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) ==
          MAP_FAILED);
    CHECK(ftruncate(fd, 0) != 0);
    CHECK(pwrite(fd, "x", 1, 0) < 0);
    // Nor can a rank reopen it for writing through /proc (root may: as
    // root, a child drops to nobody first).
    const std::string reopen = absl::StrCat("/proc/self/fd/", fd);
    if (geteuid() != 0) {
      CHECK(open(reopen.c_str(), O_RDWR) < 0);
      continue;
    }
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(2);
      _exit(open(reopen.c_str(), O_RDWR) < 0 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  // Anyone else is refused, and the daemon serves on.
  auto refused = [&](const std::string& asked, absl::StatusCode code) {
    absl::StatusOr<segments::SegmentTable> t =
        segments::FetchSegmentTable(socket, asked, response.memory_bytes(), absl::Seconds(10));
    INFO(t.status().ToString());
    return t.status().code() == code;
  };
  CHECK(refused(segments::LoadSpaceRequest(stranger.session(), response.load_id()),
                absl::StatusCode::kNotFound));
  CHECK(refused(segments::LoadSpaceRequest(owner.session(), "load-0000000000000000"),
                absl::StatusCode::kNotFound));
  CHECK(refused(segments::LoadSpaceRequest(owner.session(), ""), absl::StatusCode::kNotFound));
  CHECK(refused(segments::LoadSpaceRequest("", response.load_id()), absl::StatusCode::kNotFound));
  CHECK(refused(request + "\n" + response.load_id(), absl::StatusCode::kNotFound));
  CHECK(refused(segments::LoadSpaceRequest("no-such-session", response.load_id()),
                absl::StatusCode::kNotFound));

  // The load completes bit-exact from the shared files, none through the
  // pool; once it is over, its files are refused too.
  bool finished = false;
  v1::LoadBatch last;
  REQUIRE(owner.PumpLoad(response, into, -1, &finished, &last).ok());
  REQUIRE(finished);
  CHECK(into[0].bytes == saved[0].bytes);
  const v1::GetStatusResponse status = d.Status();
  CHECK(status.memory_bytes_in_place() == saved[0].bytes.size());
  CHECK(status.memory_bytes_read() == saved[0].bytes.size());
  CHECK(refused(request, absl::StatusCode::kNotFound));

  // A rank that keeps the descriptors pins nothing once the step goes: its
  // files' pages are taken back (the budget no longer counts them).
  REQUIRE(owner.Save(2, v1::SAVE_TIER_MEMORY, Model(2048, 8)).ok());
  REQUIRE(owner.Save(3, v1::SAVE_TIER_MEMORY, Model(2048, 9)).ok());
  // Step 2 leaves the tier once its background copy to disk is done.
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) {
    return MemorySteps(s, "owner") == std::vector<int64_t>{3};
  }));
  for (const segments::ReceivedSegment& file : table->segments) {
    struct stat st {};
    REQUIRE(fstat(file.fd.get(), &st) == 0);
    CHECK(st.st_blocks == 0);
  }
  REQUIRE(d.Running());
}

TEST_CASE("a rank asks for its next batch while it copies one read in place; never a third",
          "[memory_tier_fault][lookahead]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB), "--batch_bytes=1048576"}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  TierRank rank(*stub, "ahead");
  REQUIRE(rank.Save(1, v1::SAVE_TIER_MEMORY, Model(2048, 7)).ok());  // 8 MiB: groups of 1 MiB
  std::vector<RawTensor> into = EmptyModel(2048);
  v1::LoadResponse response;
  REQUIRE(rank.StartLoad(1, v1::LOAD_TIER_MEMORY, into, &response).ok());
  // Releases `done`, then asks until a batch is ready.
  auto ready = [&](uint64_t done) {
    v1::LoadBatch batch;
    for (int polls = 0; polls < 10'000; ++polls) {
      batch.Clear();
      grpc::Status s = rank.NextBatch(response, done, &batch);
      INFO(s.error_message());
      REQUIRE(s.ok());
      if (batch.batch_id() != 0 || batch.last()) break;
      done = 0;
    }
    return batch;
  };
  const v1::LoadBatch first = ready(0);
  REQUIRE(first.batch_id() != 0);
  REQUIRE_FALSE(first.last());
  CHECK(first.roomless());  // read in place: no pool room
  // Asked ahead, the first still held: the next one comes.
  const v1::LoadBatch second = ready(0);
  REQUIRE(second.batch_id() != 0);
  CHECK(second.batch_id() != first.batch_id());
  // Two held: a third waits for a release.
  v1::LoadBatch third;
  REQUIRE(rank.NextBatch(response, 0, &third).ok());
  CHECK(third.batch_id() == 0);
  CHECK_FALSE(third.last());
  // Released out of order: refused, naming the one to release first.
  grpc::Status wrong = rank.NextBatch(response, second.batch_id(), &third);
  CHECK(wrong.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(absl::StrContains(wrong.error_message(), absl::StrCat("holds batch ", first.batch_id())));
  // The first released, the next comes.
  const v1::LoadBatch after = ready(first.batch_id());
  CHECK((after.batch_id() != 0 || after.last()));
  CHECK(after.batch_id() != second.batch_id());
}

TEST_CASE("ckptd SIGKILLed and restarted: memory steps are gone, named, durable ones stay",
          "[memory_tier_fault][restart]") {
  TestDaemon d;
  const std::vector<std::string> flags = {BudgetFlag(64 * kMiB)};
  REQUIRE(d.Start(flags).ok());
  RequireAllOk(d.RunRanks("phoenix", "save", 1, 1, 1, 0));  // durable
  RequireAllOk(d.RunRanks("phoenix", "save", 1, 2, 1, 0, {"--tier=memory"}));
  RequireAllOk(d.RunRanks("phoenix", "save", 1, 3, 1, 0, {"--tier=both"}));
  RequireAllOk(d.RunRanks("phoenix", "save", 1, 4, 1, 0, {"--tier=memory"}));
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 1; }));
  RequireAllOk(d.RunRanks("ghost", "save", 1, 1, 1, 0, {"--tier=memory"}));  // memory only

  CHECK(d.Kill().signal == SIGKILL);
  REQUIRE(d.Start(flags).ok());
  const v1::GetStatusResponse status = d.Status();
  CHECK(status.memory_tier_bytes() == 0);
  CHECK(status.memory_tier_jobs_size() == 0);
  CHECK(ListedSteps(d, "phoenix") == std::vector<int64_t>{1, 3});
  // Latest is the newest durable step now; it loads bit-exact.
  for (const ExitInfo& r : d.RunRanks("phoenix", "load", 1, -1, 1, 1)) {
    INFO(r.output);
    CHECK(r.ok());
    CHECK(absl::StrContains(r.output, "loaded step 3:"));
    CHECK(absl::StrContains(r.output, "tiers=durable"));
  }
  // A step that was in memory only: NOT_FOUND, naming the step.
  for (const std::string from : {"any", "memory", "durable"}) {
    for (const ExitInfo& r :
         d.RunRanks("phoenix", "load", 1, 4, 1, 1, {absl::StrCat("--from=", from)})) {
      INFO(from << ": " << r.output);
      CHECK_FALSE(r.ok());
      CHECK(absl::StrContains(r.output, "NOT_FOUND"));
      CHECK(absl::StrContains(r.output, "4"));
    }
  }
  // Memory is asked for and has nothing of the job.
  for (const ExitInfo& r : d.RunRanks("phoenix", "load", 1, -1, 1, 1, {"--from=memory"})) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, "NOT_FOUND"));
    CHECK(absl::StrContains(r.output, "memory tier"));
  }
  // A job that lived in memory alone is gone everywhere, said clearly.
  const ExitInfo list = d.Ckptctl({"list", "ghost"});
  INFO(list.output);
  CHECK(absl::StrContains(list.output, "no checkpoints for job ghost"));
  for (const ExitInfo& r : d.RunRanks("ghost", "load", 1, -1, 1, 1)) {
    INFO(r.output);
    CHECK_FALSE(r.ok());
    CHECK(absl::StrContains(r.output, "NOT_FOUND"));
  }
  for (const std::string step : {"1", "3"}) {
    const ExitInfo verify = d.Ckptctl({"verify", "phoenix", step});
    INFO(verify.output);
    CHECK(verify.ok());
  }
  // And the tier works again after the restart.
  RequireAllOk(d.RunRanks("phoenix", "save", 1, 5, 1, 0, {"--tier=memory"}));
  for (const ExitInfo& r : d.RunRanks("phoenix", "load", 1, -1, 1, 1)) {
    INFO(r.output);
    CHECK(absl::StrContains(r.output, "loaded step 5:"));
    CHECK(absl::StrContains(r.output, "tiers=memory"));
  }
}

TEST_CASE("ckptctl list, inspect, verify and gc of a job only in memory",
          "[memory_tier_fault][ckptctl]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB), "--fault_corrupt_at=memory.after_commit"}).ok());
  // The corruption point flips a byte of the first memory step committed.
  RequireAllOk(d.RunRanks("only", "save", 1, 1, 1, 0, {"--tier=memory"}));
  REQUIRE(d.WaitForOutput("corruption point memory.after_commit reached"));
  const ExitInfo list = d.Ckptctl({"list", "only"});
  INFO(list.output);
  CHECK(list.ok());
  CHECK(absl::StrContains(list.output, "memory"));
  const ExitInfo inspect = d.Ckptctl({"inspect", "only", "1"});
  INFO(inspect.output);
  CHECK(inspect.ok());
  CHECK(absl::StrContains(inspect.output, "\"step\""));
  // The memory copy is bad: verify says so, naming the memory copy.
  const ExitInfo verify = d.Ckptctl({"verify", "only", "1"});
  INFO(verify.output);
  CHECK_FALSE(verify.ok());
  CHECK(absl::StrContains(verify.output, "memory"));
  const ExitInfo latest = d.Ckptctl({"verify", "only", "latest"});
  INFO(latest.output);
  CHECK_FALSE(latest.ok());
  // A step in neither tier: NOT_FOUND, not a crash.
  const ExitInfo missing = d.Ckptctl({"inspect", "only", "9"});
  INFO(missing.output);
  CHECK_FALSE(missing.ok());
  CHECK(absl::StrContains(missing.output, "9"));
  const ExitInfo gc = d.Ckptctl({"gc", "only"});
  INFO("gc: " << gc.output);
  CHECK(d.Running());
  CHECK(MemorySteps(d.Status(), "only") == std::vector<int64_t>{1});
}

TEST_CASE("a step saved to memory+durable whose number storage already has",
          "[memory_tier_fault][persist]") {
  TestDaemon d;
  REQUIRE(d.Start({BudgetFlag(64 * kMiB)}).ok());
  std::unique_ptr<NodeStub> stub = d.Stub();
  TierRank rank(*stub, "twice");
  const std::vector<RawTensor> old_bytes = Model(64, 301);
  const std::vector<RawTensor> new_bytes = Model(64, 302);
  REQUIRE(rank.Save(5, v1::SAVE_TIER_DURABLE, old_bytes).ok());
  // Saving step 5 again, to memory and storage: storage cannot take it.
  // Either the save is refused up front (ALREADY_EXISTS), or it succeeds
  // and storage ends up with its bytes. A save that reports success while
  // storage silently keeps other bytes under the same step loses the
  // trainer's checkpoint at the next daemon restart.
  const grpc::Status saved = rank.Save(5, v1::SAVE_TIER_MEMORY_AND_DURABLE, new_bytes);
  INFO(saved.error_message());
  if (saved.ok()) {
    REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) {
      return s.memory_persists() + s.memory_persist_failures() == 1;
    }));
    const v1::GetStatusResponse status = d.Status();
    // Found here once: the save succeeded, the background persist failed
    // with ALREADY_EXISTS, and storage kept the old step 5 under the number
    // the trainer was told is durable. Now refused when planned.
    CHECK(status.memory_persist_failures() == 0);
    std::vector<RawTensor> into = EmptyModel(64);
    int64_t loaded = -1;
    REQUIRE(rank.Load(5, v1::LOAD_TIER_DURABLE, into, &loaded).ok());
    CHECK(into[0].bytes == new_bytes[0].bytes);
    REQUIRE(d.WaitForOutput("persist job=twice step=5"));
    const std::string log = d.Output();
    const size_t at = log.find("persist job=twice step=5");
    INFO(log.substr(at, log.find('\n', at) - at));
    CHECK_FALSE(absl::StrContains(log, "outcome=failed"));
  } else {
    CHECK(saved.error_code() == StatusCode::ALREADY_EXISTS);
  }
  // Memory-only over a durable step of the same number: the two tiers hold
  // different bytes under one step; a load must at least be consistent
  // with what `list` calls it.
  const grpc::Status memory_only = rank.Save(6, v1::SAVE_TIER_DURABLE, old_bytes);
  REQUIRE(memory_only.ok());
  const grpc::Status over = rank.Save(6, v1::SAVE_TIER_MEMORY, new_bytes);
  INFO("memory save of durable step 6: " << over.error_message());
  if (over.ok()) {
    std::vector<RawTensor> any = EmptyModel(64), durable = EmptyModel(64);
    int64_t loaded = -1;
    std::string tiers;
    REQUIRE(rank.Load(6, v1::LOAD_TIER_ANY, any, &loaded, &tiers).ok());
    REQUIRE(rank.Load(6, v1::LOAD_TIER_DURABLE, durable, &loaded).ok());
    // One step number, two checkpoints: reported, not asserted (design).
    WARN("step 6 loads as " << (any[0].bytes == new_bytes[0].bytes ? "new" : "old")
                            << " bytes from " << tiers << " and as "
                            << (durable[0].bytes == new_bytes[0].bytes ? "new" : "old")
                            << " bytes from durable");
  }
  CHECK(d.Running());
}

}  // namespace ckpt::testing
