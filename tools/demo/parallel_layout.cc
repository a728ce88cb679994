#include "tools/demo/parallel_layout.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/demo/layout_parts.h"

namespace ckpt::testing {
namespace {

constexpr int kLayers = 4;

}  // namespace

std::vector<HostTensor> ParallelLayout(int rank, Parallelism p, int scale) {
  const int tp = rank % p.tp;
  const int stage = rank / p.tp % p.pp;
  const int dp = rank / (p.tp * p.pp);
  const int64_t hidden = 64 * scale;
  const int64_t ffn = 4 * hidden;
  const int64_t vocab = 250 * scale;
  std::vector<HostTensor> out;
  // Column-parallel (rows split) and row-parallel (columns split) weights,
  // replicated over DP.
  auto rows = [&](const std::string& fqn, int64_t r, int64_t c) {
    auto [r0, r1] = Split(r, p.tp, tp);
    out.push_back(Tensor(fqn, DType::kBFloat16, {r, c}, Region::Box({r0, 0}, {r1 - r0, c})));
  };
  auto columns = [&](const std::string& fqn, int64_t r, int64_t c) {
    auto [c0, c1] = Split(c, p.tp, tp);
    out.push_back(Tensor(fqn, DType::kBFloat16, {r, c}, Region::Box({0, c0}, {r, c1 - c0})));
  };
  // Optimizer state of a rows-split weight: this TP shard's rows are one
  // flat range of the tensor; the DP ranks each keep a piece of it.
  auto flat_state = [&](const std::string& fqn, int64_t r, int64_t c) {
    auto [r0, r1] = Split(r, p.tp, tp);
    auto [b, e] = Split((r1 - r0) * c, p.dp, dp);
    out.push_back(Tensor(fqn, DType::kFloat32, {r, c}, Region::Flat(r0 * c + b, r0 * c + e)));
  };
  if (stage == 0) rows("embed.weight", vocab, hidden);
  for (int layer = stage * kLayers / p.pp; layer < (stage + 1) * kLayers / p.pp; ++layer) {
    const std::string l = absl::StrCat("layers.", layer, ".");
    rows(l + "attn.qkv.weight", 3 * hidden, hidden);
    columns(l + "attn.out.weight", hidden, hidden);
    rows(l + "mlp.w1.weight", ffn, hidden);
    columns(l + "mlp.w2.weight", hidden, ffn);
    out.push_back(Tensor(l + "norm.weight", DType::kFloat32, {hidden}, Region::Whole()));
    flat_state("optim.exp_avg." + l + "attn.qkv.weight", 3 * hidden, hidden);
    flat_state("optim.exp_avg." + l + "mlp.w1.weight", ffn, hidden);
  }
  if (stage == p.pp - 1) {
    out.push_back(Tensor("final_norm.weight", DType::kFloat32, {hidden}, Region::Whole()));
  }
  out.push_back(Tensor("optim.step", DType::kFloat64, {}, Region::Whole()));  // 0-d, everywhere
  return out;
}

}  // namespace ckpt::testing
