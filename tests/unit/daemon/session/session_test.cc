// SaveSession and LoadSession driven directly over a FakeNode (fake_node.h):
// each session through success, a dead rank, a failed write, a cancel and a
// failed chunk, asserting the bytes a rank gets back and what is committed.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/storage/layout.h"
#include "tests/catch.h"
#include "tests/unit/daemon/session/fake_node.h"

namespace ckpt::session::testing {
namespace {

constexpr char kJob[] = "job";
constexpr int64_t kGlobal = 300000;  // bytes of tensor "w": several chunks and batches

// Rank r of `world` holds an equal flat part of "w" and its own object.
RankState StateOf(int rank, int world) {
  RankState state;
  const int64_t part = kGlobal / world;
  const int64_t begin = rank * part;
  AddShard(state, "w", kGlobal, begin, rank == world - 1 ? kGlobal - begin : part, /*seed=*/7);
  AddObject(state, "rng", absl::StrCat("rng state of rank ", rank));
  return state;
}

// Runs every rank's save on its own thread; each rank's status.
std::vector<absl::Status> SaveAll(FakeNode& node, SaveSession& save,
                                  const std::vector<RankSession>& ranks) {
  std::vector<absl::Status> results(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      results[r] = node.SaveRank(save, ranks[r], StateOf(static_cast<int>(r), ranks.size()));
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<RankSession> AttachAll(FakeNode& node, int world) {
  std::vector<RankSession> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(node.Attach(kJob, r, world));
  return ranks;
}

std::shared_ptr<SaveSession> NewSave(FakeNode& node, int64_t step, int world) {
  return std::make_shared<SaveSession>(node.context(), kJob, step, world, world);
}

bool Committed(FakeNode& node, int64_t step) {
  absl::StatusOr<std::vector<v1::CheckpointSummary>> listed =
      node.coordinator().catalog().ListCheckpoints(kJob);
  if (!listed.ok()) return false;
  for (const v1::CheckpointSummary& c : *listed) {
    if (c.step() == step) return true;
  }
  return false;
}

// Loads the whole of "w" into each of `world` ranks, and each rank's object.
struct Loaded {
  std::vector<absl::Status> status;
  std::vector<std::string> tensor;  // by rank
  std::vector<std::string> object;  // by rank
};
Loaded LoadAll(FakeNode& node, LoadSession& load, const std::vector<RankSession>& ranks,
               int64_t step) {
  Loaded loaded;
  loaded.status.resize(ranks.size());
  loaded.tensor.resize(ranks.size());
  loaded.object.resize(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      v1::LoadRequest request;
      request.set_step(step);
      AddLoadShard(request, "w", kGlobal, 0, kGlobal);
      request.add_object_keys("rng");
      std::vector<std::string> out = {std::string(kGlobal, '\0')};
      std::vector<std::string> objects;
      loaded.status[r] = node.LoadRank(load, ranks[r], request, &out, &objects);
      loaded.tensor[r] = out[0];
      if (!objects.empty()) loaded.object[r] = objects[0];
    });
  }
  for (std::thread& t : threads) t.join();
  return loaded;
}

std::string Expected() {
  std::string bytes(kGlobal, '\0');
  for (int64_t i = 0; i < kGlobal; ++i) bytes[i] = static_cast<char>(PatternByte(7, i));
  return bytes;
}

TEST_CASE("a save of three ranks commits, and a load of it into two ranks is bit-exact",
          "[session]") {
  FakeNode node;
  std::vector<RankSession> savers = AttachAll(node, 3);
  std::shared_ptr<SaveSession> save = NewSave(node, 5, 3);
  for (const absl::Status& s : SaveAll(node, *save, savers)) REQUIRE(s.ok());
  CHECK(Committed(node, 5));
  CHECK(node.pool().Stats().allocations == 0);

  // Resharded: two ranks each load the whole tensor, and ranks 0 and 1
  // their own objects.
  for (const RankSession& r : savers) REQUIRE(node.context().sessions.Detach(r.id).ok());
  std::vector<RankSession> loaders = AttachAll(node, 2);
  auto load = std::make_shared<LoadSession>(node.context(), kJob, -1, 2, 2);
  Loaded loaded = LoadAll(node, *load, loaders, -1);
  const std::string expected = Expected();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(loaded.status[r].ok());
    CHECK(loaded.tensor[r] == expected);
    CHECK(loaded.object[r] == absl::StrCat("rng state of rank ", r));
  }
}

TEST_CASE("a rank gone at the save's barrier fails the save for the rank waiting", "[session]") {
  FakeNode node;
  std::vector<RankSession> ranks = AttachAll(node, 2);
  std::shared_ptr<SaveSession> save = NewSave(node, 1, 2);
  absl::Status waiting;
  std::atomic<bool> returned{false};
  std::thread rank0([&] {
    waiting = node.SaveRank(*save, ranks[0], StateOf(0, 2));
    returned = true;
  });
  // Rank 1 never plans; its process is gone. Before rank 0 is at the
  // barrier the news is no save's (nothing to fail); once it is, the save
  // fails and rank 0 returns.
  while (!returned) save->RankGone(1);
  rank0.join();
  REQUIRE(!waiting.ok());
  CHECK(waiting.code() == absl::StatusCode::kAborted);
  CHECK_THAT(std::string(waiting.message()), Catch::Contains("rank 1 went away"));
  CHECK_THAT(std::string(waiting.message()), Catch::Contains("save of job job step 1"));
  CHECK(!Committed(node, 1));
}

TEST_CASE("a failed write fails the save on every rank and commits nothing", "[session]") {
  FakeNode node;
  std::vector<RankSession> ranks = AttachAll(node, 2);
  node.storage().SetWriteBudget(100000);  // the disk fills during the save
  std::shared_ptr<SaveSession> save = NewSave(node, 2, 2);
  std::vector<absl::Status> results = SaveAll(node, *save, ranks);
  for (const absl::Status& s : results) {
    REQUIRE(!s.ok());
    CHECK(s.code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(std::string(s.message()), Catch::Contains("save of job job step 2"));
  }
  CHECK(!Committed(node, 2));
}

TEST_CASE("a cancelled save fails every rank, commits nothing and frees its pool room",
          "[session]") {
  FakeNode node;
  std::vector<RankSession> ranks = AttachAll(node, 1);
  std::shared_ptr<SaveSession> save = NewSave(node, 3, 1);
  const RankState state = StateOf(0, 1);
  REQUIRE(save->Plan(ranks[0], state.request).ok());
  absl::StatusOr<v1::SaveBatch> batch = save->NextBatch(ranks[0]);
  REQUIRE(batch.ok());
  CHECK(node.pool().Stats().allocations > 0);
  save->Fail(absl::CancelledError("cancelled by the operator"));
  absl::StatusOr<v1::WaitSaveResponse> waited = save->Wait(absl::Seconds(10));
  REQUIRE(!waited.ok());
  CHECK(waited.status().code() == absl::StatusCode::kCancelled);
  CHECK(!save->NextBatch(ranks[0]).ok());
  v1::SubmitSnapshotRequest submit;
  submit.set_batch_id(batch->batch_id());
  (void)save->SubmitSnapshot(ranks[0], submit);
  CHECK(save->finished());
  CHECK(node.pool().Stats().allocations == 0);
  CHECK(!Committed(node, 3));
}

TEST_CASE("a chunk that fails verification fails the load, naming it", "[session]") {
  FakeNode node;
  std::vector<RankSession> savers = AttachAll(node, 1);
  std::shared_ptr<SaveSession> save = NewSave(node, 4, 1);
  for (const absl::Status& s : SaveAll(node, *save, savers)) REQUIRE(s.ok());
  REQUIRE(node.context().sessions.Detach(savers[0].id).ok());
  // Every read of the step's data file returns one flipped bit.
  absl::StatusOr<v1::CheckpointManifest> manifest =
      node.coordinator().catalog().ReadManifest(kJob, 4);
  REQUIRE(manifest.ok());
  std::string data_file;
  for (const v1::TensorEntry& tensor : manifest->tensors()) {
    for (const v1::StoredShard& shard : tensor.shards()) data_file = shard.chunks(0).file();
  }
  REQUIRE(!data_file.empty());
  node.storage().CorruptReads(
      absl::StrCat(storage::StepDir(node.options().storage_root, kJob, 4), "/", data_file));

  std::vector<RankSession> loaders = AttachAll(node, 1);
  auto load = std::make_shared<LoadSession>(node.context(), kJob, 4, 1, 1);
  Loaded loaded = LoadAll(node, *load, loaders, 4);
  REQUIRE(!loaded.status[0].ok());
  CHECK(loaded.status[0].code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(loaded.status[0].message()), Catch::Contains(data_file));
  CHECK_THAT(std::string(loaded.status[0].message()), Catch::Contains("load of job job step 4"));
}

TEST_CASE("a rank gone at the load's barrier fails the load for the rank waiting", "[session]") {
  FakeNode node;
  std::vector<RankSession> savers = AttachAll(node, 1);
  std::shared_ptr<SaveSession> save = NewSave(node, 6, 1);
  for (const absl::Status& s : SaveAll(node, *save, savers)) REQUIRE(s.ok());
  REQUIRE(node.context().sessions.Detach(savers[0].id).ok());
  std::vector<RankSession> loaders = AttachAll(node, 2);
  auto load = std::make_shared<LoadSession>(node.context(), kJob, 6, 2, 2);
  absl::Status waiting;
  std::thread rank0([&] {
    v1::LoadRequest request;
    request.set_step(6);
    AddLoadShard(request, "w", kGlobal, 0, kGlobal);
    std::vector<std::string> out = {std::string(kGlobal, '\0')};
    std::vector<std::string> objects;
    waiting = node.LoadRank(*load, loaders[0], request, &out, &objects);
  });
  while (load->Progress().ranks_arrived() == 0) {
  }
  load->RankGone(1);
  rank0.join();
  REQUIRE(!waiting.ok());
  CHECK(waiting.code() == absl::StatusCode::kAborted);
  CHECK_THAT(std::string(waiting.message()), Catch::Contains("load of job job step 6: rank 1"));
}

}  // namespace
}  // namespace ckpt::session::testing
