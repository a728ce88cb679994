// What /metrics reads from the daemon's parts at each scrape: the pool's
// gauges, the writers' queue, attached ranks and the committed checkpoints
// on disk per job (the directory tree is the truth: a gc or an operator's
// rm shows at the next scrape).
//
// Thread-safety: as the parts it reads; called from the metrics server's
// threads.
#ifndef CKPT_DAEMON_SERVER_METRICS_SAMPLER_H_
#define CKPT_DAEMON_SERVER_METRICS_SAMPLER_H_

#include "daemon/metrics/metrics.h"
#include "daemon/server/node_context.h"

namespace ckpt::server {

metrics::NodeSample SampleNode(NodeContext& context);

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_METRICS_SAMPLER_H_
