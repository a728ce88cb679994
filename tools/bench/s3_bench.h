// `ckpt-bench --s3`: persisting and loading through ckptd on an S3 root,
// against the common clients moving the same bytes to and from the same
// server in the same run (boto3's transfer manager, `aws s3 cp`, each tuned:
// 16 MiB parts, 16 in flight). The server is a real one: the Swift s3api
// the tests start (tools/dev/s3-server.sh), or --s3-endpoint with the
// AWS_* environment's keys.
#ifndef CKPT_TOOLS_BENCH_S3_BENCH_H_
#define CKPT_TOOLS_BENCH_S3_BENCH_H_

#include "tools/bench/bench_run.h"

namespace ckpt::bench {

int RunS3(const Config& c);

}  // namespace ckpt::bench

#endif  // CKPT_TOOLS_BENCH_S3_BENCH_H_
