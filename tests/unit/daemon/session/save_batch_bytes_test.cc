// The save batch ckptd hands out: sized from the pool unless a flag says.
#include "daemon/session/daemon_options.h"
#include "tests/catch.h"

namespace ckpt::session {
namespace {

constexpr uint64_t kMiB = 1 << 20;

DaemonOptions Pool(uint64_t pool_bytes) {
  DaemonOptions o;
  o.pool_bytes = pool_bytes;
  return o;
}

TEST_CASE("save batches: a sixteenth of the pool, between batch_bytes and 256 MiB",
          "[save_batch_bytes]") {
  CHECK(SaveBatchBytes(Pool(4608 * kMiB)) == 256 * kMiB);  // capped
  CHECK(SaveBatchBytes(Pool(1024 * kMiB)) == 64 * kMiB);   // a sixteenth
  CHECK(SaveBatchBytes(Pool(512 * kMiB)) == 32 * kMiB);    // batch_bytes is the least
  CHECK(SaveBatchBytes(Pool(128 * kMiB)) == 32 * kMiB);
}

TEST_CASE("save batches: the flag wins, but never beyond half the pool", "[save_batch_bytes]") {
  DaemonOptions o = Pool(1024 * kMiB);
  o.save_batch_bytes = 8 * kMiB;
  CHECK(SaveBatchBytes(o) == 8 * kMiB);
  o.save_batch_bytes = 4096 * kMiB;
  CHECK(SaveBatchBytes(o) == 512 * kMiB);
  // A tiny pool keeps its batches inside it even at the default.
  CHECK(SaveBatchBytes(Pool(8 * kMiB)) == 4 * kMiB);
}

TEST_CASE("load groups: batch_bytes, never beyond half the pool", "[save_batch_bytes]") {
  CHECK(LoadGroupBytes(Pool(4608 * kMiB)) == 32 * kMiB);
  CHECK(LoadGroupBytes(Pool(8 * kMiB)) == 4 * kMiB);
}

TEST_CASE("load groups on an object store: at least 64 MiB, never beyond half the pool",
          "[save_batch_bytes]") {
  DaemonOptions o = Pool(4608 * kMiB);
  o.object_store = true;
  CHECK(LoadGroupBytes(o) == 64 * kMiB);
  o.batch_bytes = 128 * kMiB;
  CHECK(LoadGroupBytes(o) == 128 * kMiB);
  o.pool_bytes = 64 * kMiB;
  CHECK(LoadGroupBytes(o) == 32 * kMiB);
}

}  // namespace
}  // namespace ckpt::session
