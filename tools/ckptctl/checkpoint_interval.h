// The interval that pays (Young 1974, Daly 2006): checkpointing every tau
// seconds at a stall of delta each, with a failure every M seconds on
// average, wastes delta / tau + (tau / 2 + delta) / M of the job's time;
// tau = sqrt(2 delta M) - delta minimizes it (M when delta >= M / 2). The
// agent's ckpt.policy computes the same.
#ifndef CKPT_TOOLS_CKPTCTL_CHECKPOINT_INTERVAL_H_
#define CKPT_TOOLS_CKPTCTL_CHECKPOINT_INTERVAL_H_

#include <cmath>

namespace ckpt::ctl {

inline double YoungDalyInterval(double cost_s, double mtbf_s) {
  if (cost_s >= mtbf_s / 2) return mtbf_s;
  return cost_s > 0 ? std::sqrt(2 * cost_s * mtbf_s) - cost_s : 0;
}

// The fraction of time lost at interval_s (> 0).
inline double ExpectedWaste(double interval_s, double cost_s, double mtbf_s) {
  return cost_s / interval_s + (interval_s / 2 + cost_s) / mtbf_s;
}

}  // namespace ckpt::ctl

#endif  // CKPT_TOOLS_CKPTCTL_CHECKPOINT_INTERVAL_H_
