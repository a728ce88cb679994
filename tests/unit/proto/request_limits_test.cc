// Every bound of RequestLimits: just inside passes, just beyond fails with
// the code and a message naming the bound, its value and its flag.
#include "proto/lib/request_limits.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tests/catch.h"

namespace ckpt {
namespace {

v1::TensorShard Shard(const std::string& fqn, std::vector<int64_t> shape,
                      v1::DType dtype = v1::FLOAT32) {
  v1::TensorShard s;
  s.set_fqn(fqn);
  s.set_dtype(dtype);
  for (int64_t d : shape) s.add_global_shape(d);
  return s;
}

v1::PlanSaveRequest Plan(int tensors, int objects = 0) {
  v1::PlanSaveRequest r;
  r.set_session_id("s1");
  r.set_step(3);
  for (int i = 0; i < tensors; ++i) *r.add_shards() = Shard("t" + std::to_string(i), {4});
  for (int i = 0; i < objects; ++i) {
    v1::ObjectDesc* o = r.add_objects();
    o->set_key("o" + std::to_string(i));
    o->set_length(10);
  }
  return r;
}

void RequireError(const absl::Status& s, absl::StatusCode code,
                  const std::vector<std::string>& parts) {
  INFO(s.ToString());
  REQUIRE(s.code() == code);
  for (const std::string& part : parts) {
    INFO("expected in message: " << part);
    CHECK(std::string(s.message()).find(part) != std::string::npos);
  }
}

constexpr auto kExhausted = absl::StatusCode::kResourceExhausted;
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

TEST_CASE("limits: tensors and objects per plan", "[limits]") {
  RequestLimits limits;
  limits.max_tensors_per_plan = 3;
  limits.max_objects_per_plan = 2;
  CHECK(ValidatePlanSaveRequest(Plan(3, 2), limits).ok());
  RequireError(ValidatePlanSaveRequest(Plan(4), limits), kExhausted,
               {"plan has 4 tensors; the limit is 3 (--max_tensors_per_plan)"});
  RequireError(ValidatePlanSaveRequest(Plan(0, 3), limits), kExhausted,
               {"plan has 3 objects; the limit is 2 (--max_objects_per_plan)"});

  v1::LoadRequest load;
  load.set_step(-1);
  for (int i = 0; i < 3; ++i) *load.add_tensors() = Shard("t" + std::to_string(i), {4});
  load.add_object_keys("a");
  load.add_object_keys("b");
  CHECK(ValidateLoadRequest(load, limits).ok());
  *load.add_tensors() = Shard("t9", {4});
  RequireError(ValidateLoadRequest(load, limits), kExhausted,
               {"plan has 4 tensors; the limit is 3 (--max_tensors_per_plan)"});
  load.mutable_tensors()->RemoveLast();
  load.add_object_keys("c");
  RequireError(ValidateLoadRequest(load, limits), kExhausted,
               {"3 object keys; the limit is 2 (--max_objects_per_plan)"});
}

TEST_CASE("limits: default tensors per plan", "[limits]") {
  v1::PlanSaveRequest r = Plan(0);
  for (int i = 0; i <= 100'000; ++i) *r.add_shards() = Shard("t", {1});
  RequireError(ValidatePlanSaveRequest(r, RequestLimits{}), kExhausted,
               {"plan has 100001 tensors; the limit is 100000 (--max_tensors_per_plan)"});
}

TEST_CASE("limits: dimensions of shapes and boxes", "[limits]") {
  RequestLimits limits;
  limits.max_dims = 4;
  v1::PlanSaveRequest r = Plan(0);
  *r.add_shards() = Shard("t", {1, 2, 3, 4});
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
  *r.mutable_shards(0) = Shard("t", {1, 2, 3, 4, 5});
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"tensor t: ", "shape has dimensions 5; the limit is 4 (--max_dims)"});
  *r.mutable_shards(0) = Shard("t", {1, 2, 3, 4});
  for (int i = 0; i < 5; ++i) r.mutable_shards(0)->mutable_region()->mutable_box()->add_offsets(0);
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"region box has dimensions 5; the limit is 4 (--max_dims)"});
}

TEST_CASE("limits: shard bytes, the [2^63-1] tensor and runs per shard", "[limits]") {
  RequestLimits limits;
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  v1::PlanSaveRequest r = Plan(0);
  *r.add_shards() = Shard("huge", {kMax}, v1::INT8);
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"tensor huge: ", "has 9223372036854775807 bytes; the limit is 1099511627776",
                "(--max_shard_bytes)"});
  // Wider elements: more than 2^63-1 bytes is malformed, not merely big.
  *r.mutable_shards(0) = Shard("huge", {kMax}, v1::FLOAT32);
  RequireError(ValidatePlanSaveRequest(r, limits), kInvalid, {"more than 2^63-1 bytes"});
  // A small box of it is fine: nothing is proportional to the tensor.
  *r.mutable_shards(0) = Shard("huge", {kMax}, v1::INT8);
  r.mutable_shards(0)->mutable_region()->mutable_box()->add_offsets(kMax - 100);
  r.mutable_shards(0)->mutable_region()->mutable_box()->add_lengths(100);
  CHECK(ValidatePlanSaveRequest(r, limits).ok());

  limits.max_shard_bytes = 64;
  *r.mutable_shards(0) = Shard("t", {16}, v1::FLOAT32);
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
  *r.mutable_shards(0) = Shard("t", {17}, v1::FLOAT32);
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"has 68 bytes; the limit is 64 (--max_shard_bytes)"});

  // A 3-d box cut in its two inner dimensions: one run per outer index.
  limits = RequestLimits{};
  limits.max_runs_per_shard = 999;
  *r.mutable_shards(0) = Shard("t", {1000, 1000, 4}, v1::INT8);
  v1::Box* box = r.mutable_shards(0)->mutable_region()->mutable_box();
  for (int64_t o : {0, 0, 1}) box->add_offsets(o);
  for (int64_t l : {1000, 999, 2}) box->add_lengths(l);
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"needs 1000 strided runs; the limit is 999 (--max_runs_per_shard)"});
  limits.max_runs_per_shard = 1000;
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
  // A column of a tall tensor is a single run.
  limits.max_runs_per_shard = 1;
  *r.mutable_shards(0) = Shard("t", {int64_t{1} << 40, 2}, v1::INT8);
  box = r.mutable_shards(0)->mutable_region()->mutable_box();
  for (int64_t o : {0, 1}) box->add_offsets(o);
  for (int64_t l : {int64_t{1} << 40, int64_t{1}}) box->add_lengths(l);
  limits.max_shard_bytes = int64_t{1} << 40;
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
}

TEST_CASE("limits: objects and bytes per rank", "[limits]") {
  RequestLimits limits;
  limits.max_object_bytes = 100;
  v1::PlanSaveRequest r = Plan(0, 1);
  r.mutable_objects(0)->set_length(100);
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
  // Near 2^64: the length that once wrapped the padding.
  r.mutable_objects(0)->set_length(std::numeric_limits<uint64_t>::max() - 5);
  RequireError(
      ValidatePlanSaveRequest(r, limits), kExhausted,
      {"object o0 has 18446744073709551610 bytes; the limit is 100", "(--max_object_bytes)"});
  r.mutable_objects(0)->set_length(10);
  *r.add_objects() = r.objects(0);
  RequireError(ValidatePlanSaveRequest(r, limits), kInvalid, {"lists object o0 twice"});

  limits.max_bytes_per_rank = 50;
  r = Plan(3, 2);  // 3 * 16 + 2 * 10 bytes
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"the limit is 50 (--max_bytes_per_rank)"});
  limits.max_bytes_per_rank = 68;
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
}

TEST_CASE("limits: user metadata", "[limits]") {
  RequestLimits limits;
  limits.max_user_metadata_entries = 2;
  limits.max_user_metadata_bytes = 10;
  v1::PlanSaveRequest r = Plan(1);
  (*r.mutable_user_metadata())["ab"] = "cd";
  (*r.mutable_user_metadata())["ef"] = "ghij";
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
  (*r.mutable_user_metadata())["x"] = "";
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"user metadata has 3 entries; the limit is 2 (--max_user_metadata_entries)"});
  r.mutable_user_metadata()->erase("x");
  (*r.mutable_user_metadata())["ef"] = "ghijk";
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"11 bytes of keys and values; the limit is 10 (--max_user_metadata_bytes)"});
}

TEST_CASE("limits: names", "[limits]") {
  RequestLimits limits;
  limits.max_name_bytes = 8;
  v1::PlanSaveRequest r = Plan(0);
  *r.add_shards() = Shard("12345678", {2});
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
  *r.mutable_shards(0) = Shard("123456789", {2});
  RequireError(ValidatePlanSaveRequest(r, limits), kExhausted,
               {"tensor name is 9 bytes; the limit is 8 (--max_name_bytes)"});
  *r.mutable_shards(0) = Shard("../x", {2});
  RequireError(ValidatePlanSaveRequest(r, limits), kInvalid, {"outside [A-Za-z0-9._-]"});

  // Job names are directory names: NAME_MAX holds whatever the flag says.
  limits.max_name_bytes = 4096;
  v1::AttachRequest attach;
  attach.set_job(std::string(255, 'j'));
  attach.set_world_size(1);
  CHECK(ValidateAttachRequest(attach, limits).ok());
  attach.set_job(std::string(256, 'j'));
  RequireError(ValidateAttachRequest(attach, limits), kInvalid, {"256 bytes; the limit is 255"});
}

TEST_CASE("limits: attach", "[limits]") {
  RequestLimits limits;
  limits.max_world_size = 8;
  v1::AttachRequest a;
  a.set_job("job");
  a.set_world_size(8);
  a.set_rank(7);
  CHECK(ValidateAttachRequest(a, limits).ok());
  a.set_world_size(9);
  RequireError(ValidateAttachRequest(a, limits), kExhausted,
               {"world size 9; the limit is 8 (--max_world_size)"});
  a.set_world_size(std::numeric_limits<int32_t>::max());
  RequireError(ValidateAttachRequest(a, limits), kExhausted, {"--max_world_size"});
  a.set_world_size(0);
  RequireError(ValidateAttachRequest(a, limits), kInvalid, {"world size 0 is not positive"});
  a.set_world_size(4);
  a.set_rank(4);
  RequireError(ValidateAttachRequest(a, limits), kInvalid, {"rank 4 is outside world size 4"});
  a.set_rank(-1);
  RequireError(ValidateAttachRequest(a, limits), kInvalid, {"rank -1"});
  a.set_rank(0);
  a.set_local_rank(-2);
  RequireError(ValidateAttachRequest(a, limits), kInvalid, {"local rank -2 is negative"});
}

TEST_CASE("limits: malformed requests", "[limits]") {
  RequestLimits limits;
  v1::PlanSaveRequest r = Plan(1);
  r.set_step(-1);
  RequireError(ValidatePlanSaveRequest(r, limits), kInvalid, {"step -1 is negative"});
  r = Plan(0);
  *r.add_shards() = Shard("t", {3, -1});
  RequireError(ValidatePlanSaveRequest(r, limits), kInvalid, {"negative dimension"});
  *r.mutable_shards(0) = Shard("t", {3});
  r.mutable_shards(0)->set_dtype(v1::DTYPE_UNSPECIFIED);
  CHECK(ValidatePlanSaveRequest(r, limits).code() == kInvalid);
  *r.mutable_shards(0) = Shard("t", {16});
  r.mutable_shards(0)->mutable_device_buffer()->set_offset(8);
  r.mutable_shards(0)->mutable_device_buffer()->set_allocation_bytes(70);
  RequireError(ValidatePlanSaveRequest(r, limits), kInvalid,
               {"device buffer [8, +64) lies outside its allocation of 70 bytes"});
  r.mutable_shards(0)->mutable_device_buffer()->set_allocation_bytes(72);
  CHECK(ValidatePlanSaveRequest(r, limits).ok());
  r.mutable_shards(0)->mutable_device_buffer()->set_offset(std::numeric_limits<uint64_t>::max());
  CHECK(ValidatePlanSaveRequest(r, limits).code() == kInvalid);

  v1::LoadRequest load;
  load.set_step(-2);
  RequireError(ValidateLoadRequest(load, limits), kInvalid, {"step -2"});
  load.set_step(-1);
  load.add_object_keys("a/b");
  CHECK(ValidateLoadRequest(load, limits).code() == kInvalid);
  load.set_session_id(std::string(1000, 's'));
  RequireError(ValidateLoadRequest(load, limits), kInvalid, {"session id is 1000 bytes"});
}

TEST_CASE("limits: 0-d and zero-size shards are valid", "[limits]") {
  v1::PlanSaveRequest r = Plan(0, 1);
  r.mutable_objects(0)->set_length(0);
  *r.add_shards() = Shard("scalar", {});
  *r.add_shards() = Shard("empty", {3, 0, 5});
  CHECK(ValidatePlanSaveRequest(r, RequestLimits{}).ok());
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

TEST_CASE("limits: tiers are known values", "[limits]") {
  const RequestLimits limits;
  v1::PlanSaveRequest save = Plan(1);
  for (v1::SaveTier tier :
       {v1::SAVE_TIER_DURABLE, v1::SAVE_TIER_MEMORY, v1::SAVE_TIER_MEMORY_AND_DURABLE}) {
    save.set_tier(tier);
    CHECK(ValidatePlanSaveRequest(save, limits).ok());
  }
  for (int unknown : {3, -1, 1 << 30}) {
    save.set_tier(static_cast<v1::SaveTier>(unknown));
    RequireError(ValidatePlanSaveRequest(save, limits), kInvalid,
                 {"tier " + std::to_string(unknown), "unknown"});
  }
  v1::LoadRequest load;
  load.set_session_id("s1");
  load.set_step(-1);
  for (v1::LoadTier tier : {v1::LOAD_TIER_ANY, v1::LOAD_TIER_MEMORY, v1::LOAD_TIER_DURABLE}) {
    load.set_tier(tier);
    CHECK(ValidateLoadRequest(load, limits).ok());
  }
  load.set_tier(static_cast<v1::LoadTier>(9));
  RequireError(ValidateLoadRequest(load, limits), kInvalid, {"load tier 9", "unknown"});
}

}  // namespace
}  // namespace ckpt
