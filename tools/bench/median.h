// The median of a sample (the mean of the middle two for an even count):
// the benchmarks' figure for repeated, noisy measurements.
#ifndef CKPT_TOOLS_BENCH_MEDIAN_H_
#define CKPT_TOOLS_BENCH_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace ckpt::bench {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_MEDIAN_H_
