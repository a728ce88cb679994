// `ckpt-bench --codecs`: what the chunk codecs (daemon/codec) make of a
// mixed-precision model's checkpoint, and how fast, on one core, chunk by
// chunk as ckptd stores it (4 MiB). The state is synthetic, shaped like
// trained weights and Adam's moments (codec_bench.cc says how); two
// consecutive steps of it give the delta ratios.
#ifndef CKPT_TOOLS_BENCH_CODEC_BENCH_H_
#define CKPT_TOOLS_BENCH_CODEC_BENCH_H_

#include "tools/bench/bench_run.h"

namespace ckpt::bench {

int RunCodecs(const Config& c);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_CODEC_BENCH_H_
