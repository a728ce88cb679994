// What /metrics reads from the daemon's parts at each scrape: the pool's
// gauges, the writers' queue, attached ranks and the committed checkpoints
// on disk per job (the directory tree is the truth: a gc or an operator's
// rm shows at the next scrape).
//
// Thread-safety: as the parts it reads; called from the metrics server's
// threads.
#ifndef CKPT_DAEMON_SERVICE_METRICS_SAMPLER_H_
#define CKPT_DAEMON_SERVICE_METRICS_SAMPLER_H_

#include "daemon/metrics/metrics.h"
#include "daemon/session/node_context.h"

namespace ckpt::service {

metrics::NodeSample SampleNode(session::NodeContext& context);

}  // namespace ckpt::service

#endif  // CKPT_DAEMON_SERVICE_METRICS_SAMPLER_H_
