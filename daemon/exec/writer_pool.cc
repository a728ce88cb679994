#include "daemon/exec/writer_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "daemon/fault/fault_points.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/status_context.h"

namespace ckpt::exec {

WriterPool::WriterPool(int threads, unsigned max_batch, int nice, std::function<void()> prepare)
    : max_batch_(max_batch) {
  for (int i = 0; i < threads; ++i) queues_.push_back(std::make_unique<Queue>());
  absl::BlockingCounter prepared(threads);
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this, i, nice, &prepare, &prepared] {
      if (prepare) prepare();
      prepared.DecrementCount();
      // Linux: a thread's nice value is per thread (its tid).
      if (nice != 0 && setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice) != 0) {
        const absl::Status s =
            ErrnoStatus(errno, absl::StrCat("writer ", i, ": setpriority(", nice, ")"));
        std::fprintf(stderr, "ckptd: %s\n", std::string(s.message()).c_str());
      }
      Run(*queues_[i]);
    });
  }
  prepared.Wait();
}

WriterPool::~WriterPool() {
  for (auto& queue : queues_) {
    absl::MutexLock lock(&queue->mu);
    queue->stop = true;
  }
  for (std::thread& t : workers_) t.join();
}

void WriterPool::Submit(int writer, std::vector<WriteTask> tasks) {
  Queue& queue = *queues_[writer % queues_.size()];
  queued_.fetch_add(tasks.size(), std::memory_order_relaxed);
  absl::MutexLock lock(&queue.mu);
  for (WriteTask& task : tasks) queue.tasks.push_back(std::move(task));
}

void WriterPool::Run(Queue& queue) {
  for (;;) {
    std::vector<WriteTask> batch;
    {
      absl::MutexLock lock(&queue.mu);
      queue.mu.Await(absl::Condition(
          +[](Queue* q)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) { return q->stop || !q->tasks.empty(); },
          &queue));
      if (queue.tasks.empty()) return;  // stopping
      while (!queue.tasks.empty() && batch.size() < max_batch_) {
        batch.push_back(std::move(queue.tasks.front()));
        queue.tasks.pop_front();
      }
    }
    // Consecutive tasks of one save's file form one batch.
    size_t begin = 0;
    while (begin < batch.size()) {
      size_t end = begin + 1;
      while (end < batch.size() && batch[end].sink == batch[begin].sink &&
             batch[end].file == batch[begin].file) {
        ++end;
      }
      std::vector<WriteTask> group(std::make_move_iterator(batch.begin() + begin),
                                   std::make_move_iterator(batch.begin() + end));
      const size_t written = group.size();
      WriteGroup(group);
      queued_.fetch_sub(written, std::memory_order_relaxed);
      begin = end;
    }
  }
}

void WriterPool::WriteGroup(std::vector<WriteTask>& group) {
  ChunkSink& sink = *group.front().sink;
  std::vector<WrittenChunk> written;
  written.reserve(group.size());
  absl::Status status;
  if (sink.Abandoned()) {
    // Still reported, without CRCs, so the save's count of chunks in flight drains.
    for (const WriteTask& task : group)
      written.push_back({task.tag, task.file, task.file_offset, 0, 0});
    status = absl::AbortedError("save abandoned");
  } else {
    std::vector<storage::IoOp> ops;
    ops.reserve(group.size());
    for (const WriteTask& task : group) {
      written.push_back(
          {task.tag, task.file, task.file_offset, task.payload, Crc32c(task.data, task.payload)});
      ops.push_back({task.file_offset, const_cast<char*>(task.data), task.length});
    }
    status = sink.File(group.front().file)->WriteBatch(ops);
    FaultPoint("save.chunk_written");
  }
  // Keep the sink alive past the callback: it may finish the save.
  std::shared_ptr<ChunkSink> keep = group.front().sink;
  group.clear();
  keep->OnChunksWritten(written, status);
}

}  // namespace ckpt::exec
