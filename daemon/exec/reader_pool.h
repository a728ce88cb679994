// Reader threads, shared by every load of the daemon (as the writers are by
// every save): a fixed set of --reader_threads threads, so a host's thread
// count does not grow with the loads in flight. A load hands over one task
// per group it reads and queues the next when that one is done, so the
// threads go round the concurrent loads a group at a time and no load waits
// for another to finish. The threads are storage's TaskThreads (the S3
// backend's transfers run on the same kind).
#ifndef CKPT_DAEMON_EXEC_READER_POOL_H_
#define CKPT_DAEMON_EXEC_READER_POOL_H_

#include "daemon/storage/task_threads.h"

namespace ckpt::exec {

using ReaderPool = storage::TaskThreads;

}  // namespace ckpt::exec

#endif  // CKPT_DAEMON_EXEC_READER_POOL_H_
