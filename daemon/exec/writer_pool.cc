#include "daemon/exec/writer_pool.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "daemon/codec/step_delta.h"
#include "daemon/fault/fault_points.h"
#include "daemon/storage/aligned_buffer.h"
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
// O_DIRECT's block, the largest alignment the pool hands out.
constexpr uint64_t kBlock = 4096;

const char* ZeroBlock() {
  alignas(kBlock) static const char zeros[kBlock] = {};
  return zeros;
}

}  // namespace

bool WriterPool::DeltaOf(const WriteTask& task, std::unique_ptr<storage::ChunkReader>& reader,
                         bool& base_failed, char* xored) {
  thread_local storage::AlignedBuffer base;
  char* into = base.Get(AlignUp(task.payload, kBlock));
  if (into == nullptr || task.delta_base->length() != task.payload) return false;
  if (reader == nullptr) {
    reader = std::make_unique<storage::ChunkReader>(*task.delta_source->backend,
                                                    task.delta_source->dir, kBlock);
  }
  // The base chunk read, decoded and checked against its CRC; one that
  // cannot be (removed meanwhile, damaged) makes this chunk whole, and the
  // group's others against that base too (said once).
  if (base_failed) return false;
  if (absl::Status s = reader->Read(*task.delta_base, "the base chunk", into); !s.ok()) {
    std::fprintf(stderr, "ckptd: step delta against %s: storing chunks whole: %s\n",
                 task.delta_source->dir.c_str(), std::string(s.message()).c_str());
    base_failed = true;
    return false;
  }
  std::memcpy(xored, task.data, task.payload);
  codec::XorInto({into, task.payload}, {xored, task.payload});
  return true;
}

absl::Status WriterPool::EncodeAndWrite(storage::WritableFile& file,
                                        const std::vector<WriteTask>& group,
                                        std::vector<WrittenChunk>& written) {
  std::vector<storage::IoOp> ops;
  ops.reserve(group.size());
  thread_local storage::AlignedBuffer scratch_buffer;
  thread_local storage::AlignedBuffer xored_buffer;
  thread_local std::string encoded;
  char* scratch = nullptr;
  uint64_t used = 0;
  std::unique_ptr<storage::ChunkReader> base_reader;  // the group's one sink's base
  bool base_failed = false;
  // Every task is reported, written or not: a write that fails leaves the
  // rest unwritten, and the save counts each chunk back before it cleans up.
  for (const WriteTask& task : group) {
    WrittenChunk& w = written.emplace_back();
    w.tag = task.tag;
    w.file = task.file;
    w.file_offset = task.file_offset;
  }
  for (size_t i = 0; i < group.size(); ++i) {
    const WriteTask& task = group[i];
    WrittenChunk& w = written[i];
    w.payload = task.payload;
    w.crc32c = Crc32c(task.data, task.payload);
    w.element_bytes = task.element_bytes;
    storage::IoOp op{task.file_offset, const_cast<char*>(task.data), task.length};
    // The scratch is taken only by saves that encode.
    const bool encodable =
        (task.codec != codec::Codec::kNone || task.delta_base != nullptr) &&
        task.payload <= kScratchBytes && task.alignment <= kBlock &&
        (scratch != nullptr || (scratch = scratch_buffer.Get(kScratchBytes)) != nullptr);
    absl::StatusOr<codec::Codec> got = codec::Codec::kNone;
    // A delta where the base's place holds the same chunk and the XOR
    // encodes smaller by the codec's margin; the chunk whole otherwise.
    if (encodable && task.delta_base != nullptr) {
      char* xored = xored_buffer.Get(task.payload);
      if (xored != nullptr && DeltaOf(task, base_reader, base_failed, xored)) {
        const codec::Codec codec =
            task.codec == codec::Codec::kNone ? codec::Codec::kGroupedZstd : task.codec;
        got = codec::EncodeChunk(codec, task.element_bytes, {xored, task.payload},
                                 codec::EncodeOptions(), &encoded);
        if (got.ok() && *got != codec::Codec::kNone) {
          w.delta_base = task.delta_base;
          w.delta_base_step = task.delta_source->step;
          w.delta_ordinal = task.delta_source->ordinal;
        }
      }
    }
    if (w.delta_base == nullptr && encodable && task.codec != codec::Codec::kNone) {
      got = codec::EncodeChunk(task.codec, task.element_bytes, {task.data, task.payload},
                               codec::EncodeOptions(), &encoded);
    }
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
      if (padded < task.length) {
        // The place's last block: the file reaches its planned size.
        ops.push_back({task.file_offset + task.length - task.alignment,
                       const_cast<char*>(ZeroBlock()), task.alignment});
      }
      w.codec = *got;
      w.stored_length = encoded.size();
      w.stored_crc32c = Crc32c(encoded.data(), encoded.size());
    }
    ops.push_back(op);
  }
  return file.WriteBatch(ops);
}

}  // namespace ckpt::exec
