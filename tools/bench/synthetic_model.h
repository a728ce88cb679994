// The synthetic trained state ckpt-bench's codec figures are measured on
// (codec_bench.cc), and its ranks fill their tensors with for the persist
// figures (bench_worker.cc "trained").
#ifndef CKPT_TOOLS_BENCH_SYNTHETIC_MODEL_H_
#define CKPT_TOOLS_BENCH_SYNTHETIC_MODEL_H_

#include <cstdint>
#include <cstring>

namespace ckpt::bench {

// The synthetic state. Per parameter, as mixed-precision Adam keeps it: a
// bf16 weight (the model), an fp32 master weight, and Adam's first and
// second moments in fp32: 14 bytes. Each tensor of 16 Mi parameters has
// its own scale, drawn from 0.01 to 0.05 as trained layers' are (one in
// eight is a norm's weight: around 1.0 with that spread). Values are
// normal-like (a sum of four uniforms, centred: Irwin-Hall). Step t+1 is
// step t after one Adam update: the master weight moves by lr (1e-4)
// times a normal-like update of unit scale, the bf16 weight is the new
// master rounded to nearest even, m = 0.9 m + 0.1 g and v = 0.999 v +
// 0.001 g^2 for a gradient g of scale 1e-3.
class SyntheticModel {
 public:
  explicit SyntheticModel(uint64_t seed) : state_(seed | 1) {}

  // One normal-like value of unit scale.
  float Normal() {
    float sum = 0;
    for (int i = 0; i < 4; ++i) sum += static_cast<float>(Next() >> 40) * 0x1p-24f;
    return (sum - 2.0f) * 1.7320508f;
  }
  float Scale(uint64_t tensor) const {
    return 0.01f + 0.04f * static_cast<float>((tensor * 0x9e3779b97f4a7c15ull) >> 40) * 0x1p-24f;
  }

 private:
  uint64_t Next() {  // xorshift64*
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545f4914f6cdd1dull;
  }
  uint64_t state_;
};

inline uint16_t Bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000) == 0x7f800000) return static_cast<uint16_t>(bits >> 16);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_SYNTHETIC_MODEL_H_
