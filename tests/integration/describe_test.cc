// Client::Describe: what a committed step holds, from its manifest, with no
// other rank taking part (torch.distributed.checkpoint's reader builds its
// metadata from it); and a save with an empty region (an uneven last shard
// holds no rows) that the client once refused for having no memory.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "ckpt/client.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

void Commit(absl::StatusOr<std::shared_ptr<SaveHandle>> handle) {
  INFO(handle.status().ToString());
  REQUIRE(handle.ok());
  absl::Status persisted = (*handle)->WaitPersisted();
  INFO(persisted.ToString());
  REQUIRE(persisted.ok());
}

}  // namespace

TEST_CASE("Describe lists a step's tensors and objects; latest and absent steps",
          "[integration][describe]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  std::unique_ptr<Client> client = AttachRank(d, "described", 0, 1);
  std::vector<float> weights(12, 1.5f);
  std::vector<int64_t> counts(10, 7);
  HostTensor w{"model.w", DType::kFloat32, {3, 4}, Region::Whole(), weights.data()};
  HostTensor c{"model.c", DType::kInt64, {20}, Region::Box({5}, {10}), counts.data()};
  SaveOptions partial;
  partial.partial = true;  // c covers 10 of its 20 elements
  Commit(client->Save(4, {w, c}, {{"epoch", true, "3"}, {"mine", false, "x"}}, partial));
  Commit(client->Save(9, {w}, {}));

  absl::StatusOr<CheckpointContents> four = client->Describe(4);
  INFO(four.status().ToString());
  REQUIRE(four.ok());
  CHECK(four->step == 4);
  REQUIRE(four->tensors.size() == 2);
  for (const CheckpointContents::Tensor& t : four->tensors) {
    if (t.fqn == "model.w") {
      CHECK(t.dtype == DType::kFloat32);
      CHECK(t.global_shape == std::vector<int64_t>{3, 4});
      CHECK_FALSE(t.partial);
    } else {
      CHECK(t.fqn == "model.c");
      CHECK(t.dtype == DType::kInt64);
      CHECK(t.global_shape == std::vector<int64_t>{20});
      CHECK(t.partial);
    }
  }
  REQUIRE(four->objects.size() == 2);
  for (const CheckpointContents::Object& o : four->objects) {
    CHECK(o.rank == (o.key == "epoch" ? -1 : 0));
  }

  absl::StatusOr<CheckpointContents> latest = client->Describe(kLatestStep);
  REQUIRE(latest.ok());
  CHECK(latest->step == 9);
  CHECK(latest->tensors.size() == 1);
  CHECK(latest->objects.empty());

  absl::StatusOr<CheckpointContents> absent = client->Describe(5);
  CHECK(absl::IsNotFound(absent.status()));
  CHECK(absl::StrContains(absent.status().message(), "step 5"));
}

TEST_CASE("an empty region saves and loads beside the others", "[integration][describe]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  // Three rows over two ranks as torch.chunk splits them when one rank has
  // none: rank 0 rows [0, 3), rank 1 rows [3, 3).
  std::unique_ptr<Client> first = AttachRank(d, "uneven", 0, 2);
  std::unique_ptr<Client> second = AttachRank(d, "uneven", 1, 2);
  std::vector<int32_t> rows = {1, 2, 3, 4, 5, 6};
  HostTensor full{"t", DType::kInt32, {3, 2}, Region::Box({0, 0}, {3, 2}), rows.data()};
  HostTensor none{"t", DType::kInt32, {3, 2}, Region::Box({3, 0}, {0, 2}), nullptr};
  absl::StatusOr<std::shared_ptr<SaveHandle>> a = first->Save(1, {full}, {});
  absl::StatusOr<std::shared_ptr<SaveHandle>> b = second->Save(1, {none}, {});
  Commit(std::move(a));
  Commit(std::move(b));

  std::vector<int32_t> back(6, 0);
  HostTensor whole{"t", DType::kInt32, {3, 2}, Region::Whole(), back.data()};
  std::unique_ptr<Client> reader = AttachRank(d, "uneven", 0, 1);
  absl::StatusOr<int64_t> loaded = reader->Load(1, {whole});
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  CHECK(back == rows);
}

}  // namespace ckpt::testing
