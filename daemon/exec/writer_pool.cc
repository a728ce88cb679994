#include "daemon/exec/writer_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "daemon/fault/fault_points.h"
#include "proto/lib/align.h"
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
    for (const WriteTask& task : group) {
      WrittenChunk& w = written.emplace_back();
      w.tag = task.tag;
      w.file = task.file;
      w.file_offset = task.file_offset;
    }
    status = absl::AbortedError("save abandoned");
  } else {
    status = EncodeAndWrite(*sink.File(group.front().file), group, written);
    FaultPoint("save.chunk_written");
  }
  // Keep the sink alive past the callback: it may finish the save.
  std::shared_ptr<ChunkSink> keep = group.front().sink;
  group.clear();
  keep->OnChunksWritten(written, status);
}

namespace {

// Encoded chunks wait here for their batch's write; a batch is written
// when the next chunk would not fit. Chunks larger than this (big objects)
// are stored raw.
constexpr uint64_t kScratchBytes = 64 << 20;

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};

char* WriterScratch() {
  thread_local std::unique_ptr<char, AlignedFree> scratch;
  if (scratch == nullptr) {
    void* p = nullptr;
    // 4 KiB: O_DIRECT's block, the largest alignment the pool hands out.
    if (posix_memalign(&p, 4096, kScratchBytes) != 0) return nullptr;
    scratch.reset(static_cast<char*>(p));
  }
  return scratch.get();
}

}  // namespace

absl::Status WriterPool::EncodeAndWrite(storage::WritableFile& file,
                                        const std::vector<WriteTask>& group,
                                        std::vector<WrittenChunk>& written) {
  std::vector<storage::IoOp> ops;
  ops.reserve(group.size());
  char* scratch = nullptr;
  uint64_t used = 0;
  thread_local std::string encoded;
  for (const WriteTask& task : group) {
    WrittenChunk& w = written.emplace_back();
    w.tag = task.tag;
    w.file = task.file;
    w.file_offset = task.file_offset;
    w.payload = task.payload;
    w.crc32c = Crc32c(task.data, task.payload);
    w.element_bytes = task.element_bytes;
    storage::IoOp op{task.file_offset, const_cast<char*>(task.data), task.length};
    const bool wanted = task.codec != codec::Codec::kNone && task.payload <= kScratchBytes &&
                        task.alignment <= 4096 &&
                        (scratch != nullptr || (scratch = WriterScratch()));
    absl::StatusOr<codec::Codec> got =
        wanted ? codec::EncodeChunk(task.codec, task.element_bytes, {task.data, task.payload},
                                    codec::EncodeOptions(), &encoded)
               : codec::Codec::kNone;
    // A chunk that cannot be encoded (an element size out of range) is
    // stored raw: the save goes on.
    if (got.ok() && *got != codec::Codec::kNone) {
      const uint64_t padded = AlignUp(encoded.size(), task.alignment);
      if (used + padded > kScratchBytes) {
        if (absl::Status s = file.WriteBatch(ops); !s.ok()) return s;
        ops.clear();
        used = 0;
      }
      char* at = scratch + used;
      std::memcpy(at, encoded.data(), encoded.size());
      std::memset(at + encoded.size(), 0, padded - encoded.size());
      used += padded;
      op = {task.file_offset, at, padded};
      w.codec = *got;
      w.stored_length = encoded.size();
      w.stored_crc32c = Crc32c(encoded.data(), encoded.size());
    }
    ops.push_back(op);
  }
  return file.WriteBatch(ops);
}

}  // namespace ckpt::exec
