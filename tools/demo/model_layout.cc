#include "tools/demo/model_layout.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "tools/demo/layout_parts.h"

namespace ckpt::testing {
namespace {

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::vector<HostTensor> SaveLayout(int rank, int world, int scale) {
  std::vector<HostTensor> out;
  // TP: rows split across all ranks.
  const std::vector<int64_t> qkv = {256 * scale, 1024};
  auto [r0, r1] = Split(qkv[0], world, rank);
  out.push_back(Tensor("model.layers.0.attn.qkv.weight", DType::kFloat32, qkv,
                       Region::Box({r0, 0}, {r1 - r0, qkv[1]})));
  // DP: every rank holds the whole embedding (replicas, written once).
  out.push_back(
      Tensor("model.embed.weight", DType::kBFloat16, {128 * scale, 512}, Region::Whole()));
  // FSDP: uneven flat ranges that cut rows in the middle.
  const std::vector<int64_t> w1 = {300 * scale, 257};
  const int64_t n = Numel(w1);
  const int64_t begin = rank == 0 ? 0 : n * rank / world + 37;
  const int64_t end = rank == world - 1 ? n : n * (rank + 1) / world + 37;
  out.push_back(
      Tensor("model.layers.0.mlp.w1.weight", DType::kFloat16, w1, Region::Flat(begin, end)));
  // TP=2 inside DP groups: dim 1 split in two, each half replicated.
  const std::vector<int64_t> norm = {7, 3, 5};
  if (world >= 2) {
    const bool first_half = rank % 2 == 0;
    out.push_back(
        Tensor("model.layers.0.norm.state", DType::kInt64, norm,
               first_half ? Region::Box({0, 0, 0}, {7, 2, 5}) : Region::Box({0, 2, 0}, {7, 1, 5})));
  } else {
    out.push_back(Tensor("model.layers.0.norm.state", DType::kInt64, norm, Region::Whole()));
  }
  // A 0-d scalar only rank 0 holds.
  if (rank == 0)
    out.push_back(Tensor("optimizer.loss_scale", DType::kFloat64, {}, Region::Whole()));
  // Bytes, flat-split evenly.
  const int64_t bytes = 100003 * scale;
  auto [b0, b1] = Split(bytes, world, rank);
  out.push_back(Tensor("model.quant.codes", DType::kUInt8, {bytes}, Region::Flat(b0, b1)));
  return out;
}

std::vector<HostTensor> LoadLayout(int rank, int world, int scale) {
  std::vector<HostTensor> out;
  // Columns instead of rows.
  const std::vector<int64_t> qkv = {256 * scale, 1024};
  auto [c0, c1] = Split(qkv[1], world, rank);
  out.push_back(Tensor("model.layers.0.attn.qkv.weight", DType::kFloat32, qkv,
                       Region::Box({0, c0}, {qkv[0], c1 - c0})));
  // Flat ranges instead of replicas.
  const std::vector<int64_t> embed = {128 * scale, 512};
  auto [e0, e1] = Split(Numel(embed), world, rank);
  out.push_back(Tensor("model.embed.weight", DType::kBFloat16, embed, Region::Flat(e0, e1)));
  // Row boxes instead of flat ranges; every rank also wants row 0 so that
  // several ranks read the same stored bytes.
  const std::vector<int64_t> w1 = {300 * scale, 257};
  auto [r0, r1] = Split(w1[0], world, rank);
  out.push_back(Tensor("model.layers.0.mlp.w1.weight", DType::kFloat16, w1,
                       Region::Box({r0, 0}, {r1 - r0, w1[1]})));
  out.push_back(Tensor("model.layers.0.norm.state", DType::kInt64, {7, 3, 5}, Region::Whole()));
  out.push_back(Tensor("optimizer.loss_scale", DType::kFloat64, {}, Region::Whole()));
  const int64_t bytes = 100003 * scale;
  auto [b0, b1] = Split(bytes, world, world - 1 - rank);
  out.push_back(Tensor("model.quant.codes", DType::kUInt8, {bytes}, Region::Flat(b0, b1)));
  return out;
}

std::string RngObjectBytes(int rank) {
  std::string s;
  for (int i = 0; i < 100 + rank; ++i) s += absl::StrCat("rng-", rank, "-", i, ";");
  return s;
}

std::string DataloaderObjectBytes() { return "epoch=3;sample=123456;shuffle_seed=42"; }

std::vector<SaveObject> SaveObjects(int rank) {
  return {SaveObject{"rng", false, RngObjectBytes(rank)},
          SaveObject{"dataloader", true, DataloaderObjectBytes()}};
}

}  // namespace ckpt::testing
