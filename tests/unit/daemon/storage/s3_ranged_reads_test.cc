// Reads from S3 as few ranged GETs as sensible (ranged_gets.h): the plan on
// its own, then reads over several files against the real server, each
// byte where it belongs and no more requests than the plan.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/storage/s3/ranged_gets.h"
#include "daemon/storage/s3/s3_backend.h"
#include "tests/catch.h"
#include "tests/support/s3_server.h"
#include "tests/unit/daemon/storage/test_util.h"

namespace ckpt::storage::s3 {
namespace {

constexpr size_t kMiB = 1 << 20;

char* At(std::vector<char>& v, size_t i) { return v.data() + i; }

TEST_CASE("ranged GETs: near reads join, far or overlapping ones do not, long ones split",
          "[s3_plan]") {
  std::vector<char> dst(64 * kMiB);
  // Out of order on purpose: the plan sorts by offset.
  const std::vector<IoOp> ops = {
      {4 * kMiB, At(dst, 0), kMiB},               // joins the one before it, no gap
      {0, At(dst, 8 * kMiB), 4 * kMiB},           //
      {5 * kMiB + 100, At(dst, 20 * kMiB), 100},  // a 100-byte gap: joins
      {5 * kMiB + 150, At(dst, 30 * kMiB), 10},   // overlaps the one before: its own GET
      {40 * kMiB, At(dst, 32 * kMiB), 0},         // empty: no GET
      {50 * kMiB, At(dst, 33 * kMiB), 8 * kMiB},  // far: its own, split in two
  };
  const std::vector<RangedGet> gets = PlanRangedGets(ops, 4 * kMiB + 256 * 1024, 4096);
  REQUIRE(gets.size() == 5);
  // The first two are adjacent, but 5 MiB together: over the limit.
  CHECK(gets[0].offset == 0);
  REQUIRE(gets[0].pieces.size() == 1);
  CHECK(gets[0].pieces[0].dst == At(dst, 8 * kMiB));
  CHECK(gets[0].pieces[0].length == 4 * kMiB);
  CHECK(gets[1].offset == 4 * kMiB);
  REQUIRE(gets[1].pieces.size() == 3);
  CHECK(gets[1].pieces[0].dst == At(dst, 0));
  CHECK(gets[1].pieces[1].dst == nullptr);  // the gap, read and dropped
  CHECK(gets[1].pieces[1].length == 100);
  CHECK(gets[1].pieces[2].dst == At(dst, 20 * kMiB));
  CHECK(gets[2].offset == 5 * kMiB + 150);
  CHECK(gets[3].offset == 50 * kMiB);
  CHECK(gets[3].pieces[0].length == 4 * kMiB + 256 * 1024);
  CHECK(gets[4].offset == 54 * kMiB + 256 * 1024);
  CHECK(gets[4].pieces[0].dst == At(dst, 37 * kMiB + 256 * 1024));
  CHECK(gets[4].pieces[0].length == 3 * kMiB + 768 * 1024);
  // A gap wider than allowed starts a new GET.
  const std::vector<IoOp> apart = {{0, At(dst, 0), 10}, {10 + 4097, At(dst, 100), 10}};
  CHECK(PlanRangedGets(apart, 4 * kMiB, 4096).size() == 2);
  CHECK(PlanRangedGets(apart, 4 * kMiB, 4097).size() == 1);
}

TEST_CASE("S3: reads over several files are joined GETs, scattered exact", "[s3]") {
  const std::string bucket = ckpt::testing::NewTestBucket("ranged");
  S3BackendOptions options;
  options.client = ckpt::testing::TestS3ClientOptions();
  options.bucket = bucket;
  options.part_bytes = 5 * kMiB;
  options.read_range_bytes = 8 * kMiB;
  options.read_gap_bytes = 64 * 1024;
  absl::StatusOr<std::unique_ptr<S3Backend>> backend = NewS3Backend(options);
  CKPT_REQUIRE_OK(backend);
  const size_t size = 21 * kMiB + 333;
  std::vector<std::string> data;
  std::vector<std::unique_ptr<ReadableFile>> files;
  for (int f = 0; f < 3; ++f) {
    data.push_back(testing::Pattern(size, 10 + f));
    const std::string path = absl::StrCat("s3://", bucket, "/d/f", f);
    CKPT_REQUIRE_OK(WriteFileAtomically(**backend, path, data.back()));
    auto file = (*backend)->NewReadableFile(path);
    CKPT_REQUIRE_OK(file);
    files.push_back(std::move(*file));
  }
  // Per file: adjacent chunks (one GET), one after a small gap (the same
  // GET), one far off and long (split in two), and an empty one.
  std::vector<std::string> out(3 * 5, std::string());
  std::vector<std::vector<IoOp>> ops(3);
  struct Read {
    uint64_t offset;
    size_t length;
  };
  const std::vector<Read> reads = {
      {0, kMiB}, {kMiB, 2 * kMiB}, {3 * kMiB + 1000, 5000}, {9 * kMiB, 12 * kMiB + 333}, {7, 0}};
  for (int f = 0; f < 3; ++f) {
    for (size_t r = 0; r < reads.size(); ++r) {
      std::string& buffer = out[f * reads.size() + r];
      buffer.assign(reads[r].length, '\0');
      ops[f].push_back({reads[r].offset, buffer.data(), reads[r].length});
    }
  }
  std::vector<FileReads> batch;
  for (int f = 0; f < 3; ++f) batch.push_back({files[f].get(), ops[f]});
  const uint64_t before = (*backend)->client().stats().requests.load();
  size_t failed = 99;
  CKPT_REQUIRE_OK((*backend)->ReadFiles(batch, &failed));
  // Per file: one GET for the first three reads, two for the long one.
  CHECK((*backend)->client().stats().requests.load() - before == 3 * 3);
  for (int f = 0; f < 3; ++f) {
    for (size_t r = 0; r < reads.size(); ++r) {
      INFO("file " << f << ", read " << r);
      CHECK(out[f * reads.size() + r] == data[f].substr(reads[r].offset, reads[r].length));
    }
  }
  // A read past an object's end fails before any GET, naming the file.
  std::string past(10, '\0');
  const IoOp beyond{size - 5, past.data(), 10};
  batch[1].ops = {&beyond, 1};
  const absl::Status s = (*backend)->ReadFiles(batch, &failed);
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK(failed == 1);
  CHECK(s.message().find("/d/f1") != std::string::npos);
}

}  // namespace
}  // namespace ckpt::storage::s3
