// Fuzz target: a MANIFEST file as the catalog reads it (DecodeManifest: the
// CRC32C trailer, then the parse; ValidateManifest), then, on a manifest
// that validates, loads of it planned and grouped as the daemon does. The
// requests are derived from the manifest and the input: every tensor whole,
// every stored shard's region, a box or flat range picked by the input's
// checksum, and the objects. What is checked: fuzz_support.h.
//
// A mutated file almost never keeps a matching trailer, so each input is
// also decoded with its trailer made right: the mutations reach the parser
// and the checks behind it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/request_limits.h"
#include "tests/fuzz/fuzz_support.h"

namespace ckpt::fuzz {
namespace {

constexpr int kLoadWorld = 3;
constexpr int kMaxTensors = 32;         // tensors asked for, per rank
constexpr int kMaxShardsPerTensor = 8;  // stored regions asked for, per tensor

// Adds `shard` to the request when it passes the daemon's checks on its own,
// so one odd tensor does not stop the whole rank's load from being planned.
void Ask(const v1::TensorShard& shard, v1::LoadRequest& request) {
  if (ValidateShardRequest(shard, RequestLimits{}).ok()) *request.add_tensors() = shard;
}

// A region inside `shape` chosen by `pick`: a box cut in each dimension, or
// a flat range.
v1::Region Picked(const v1::TensorEntry& tensor, uint64_t pick) {
  v1::Region region;
  if (pick & 1) {
    uint64_t elements = 1;
    for (int64_t d : tensor.global_shape()) {
      if (d < 0 || (d > 0 && elements > (uint64_t{1} << 62) / static_cast<uint64_t>(d))) {
        return region;  // invalid or huge: ask for the whole tensor
      }
      elements *= static_cast<uint64_t>(d);
    }
    const uint64_t begin = (pick >> 1) % (elements + 1);
    region.mutable_flat()->set_begin(static_cast<int64_t>(begin));
    region.mutable_flat()->set_end(
        static_cast<int64_t>(begin + (pick >> 17) % (elements - begin + 1)));
    return region;
  }
  v1::Box* box = region.mutable_box();
  for (int64_t d : tensor.global_shape()) {
    pick = pick * 6364136223846793005u + 1442695040888963407u;
    const uint64_t dim = d < 0 ? 0 : static_cast<uint64_t>(d);
    const uint64_t offset = (pick >> 33) % (dim + 1);
    box->add_offsets(static_cast<int64_t>(offset));
    box->add_lengths(static_cast<int64_t>((pick >> 13) % (dim - offset + 1)));
  }
  return region;
}

// Rank 0 asks for every tensor whole and the global objects; rank 1 for
// every stored shard's region and its own objects; rank 2 for a picked
// region of every tensor, on a GPU (the daemon's device path), and its own
// objects. Of a partial tensor, only the stored regions.
std::vector<v1::LoadRequest> DeriveRequests(const v1::CheckpointManifest& manifest, uint64_t pick) {
  std::vector<v1::LoadRequest> ranks(kLoadWorld);
  for (v1::LoadRequest& r : ranks) r.set_step(manifest.step());
  for (int t = 0; t < manifest.tensors_size() && t < kMaxTensors; ++t) {
    const v1::TensorEntry& tensor = manifest.tensors(t);
    v1::TensorShard shard;
    shard.set_fqn(tensor.fqn());
    shard.set_dtype(tensor.dtype());
    *shard.mutable_global_shape() = tensor.global_shape();
    // A partial tensor holds only its stored regions.
    if (!tensor.partial()) Ask(shard, ranks[0]);
    for (int s = 0; s < tensor.shards_size() && s < kMaxShardsPerTensor; ++s) {
      *shard.mutable_region() = tensor.shards(s).region();
      Ask(shard, ranks[1]);
    }
    if (tensor.partial()) continue;
    *shard.mutable_region() = Picked(tensor, pick + static_cast<uint64_t>(t));
    shard.mutable_device_buffer()->set_allocation_bytes(uint64_t{1} << 62);
    Ask(shard, ranks[2]);
  }
  for (const v1::ObjectEntry& object : manifest.objects()) {
    const int rank = object.rank() == -1 ? 0 : object.rank();
    if (rank < kLoadWorld && ranks[rank].object_keys_size() < 64) {
      ranks[rank].add_object_keys(object.key());
    }
  }
  return ranks;
}

}  // namespace
}  // namespace ckpt::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckpt::fuzz::Init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckpt;  // NOLINT
  const absl::string_view file(reinterpret_cast<const char*>(data), size);
  // As read from disk: a wrong trailer is DATA_LOSS.
  (void)planning::DecodeManifest(file, "MANIFEST");
  if (size < 4) return 0;
  std::string fixed(file.substr(0, size - 4));
  const uint32_t crc = Crc32c(fixed.data(), fixed.size());
  for (int i = 0; i < 4; ++i) fixed.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  absl::StatusOr<v1::CheckpointManifest> manifest = planning::DecodeManifest(fixed, "MANIFEST");
  if (!manifest.ok()) return 0;
  // The catalog checks it against the directory it was found in.
  (void)planning::ValidateManifest(*manifest, "other-job", manifest->step(), "MANIFEST");
  if (!planning::ValidateManifest(*manifest, manifest->job(), manifest->step(), "MANIFEST").ok()) {
    return 0;
  }
  const std::vector<v1::LoadRequest> ranks = fuzz::DeriveRequests(*manifest, crc);
  absl::StatusOr<v1::LoadAssignment> plan = fuzz::PlanLoadRequests(*manifest, ranks);
  if (plan.ok()) fuzz::CheckLoadAssignment(*plan, ranks);
  return 0;
}
