// Writer threads. Each thread owns one data file of every save in flight
// (file index == writer index), so one thread, and so one io_uring ring,
// writes each file. A thread takes every queued chunk at once and submits
// the ones of the same file as one batch.
//
// A chunk whose task asks for a codec is encoded here, on the writer's
// thread (daemon/codec), and its encoded bytes fill the start of the place
// the plan gave its raw bytes: compression costs the writers' cores, never
// the trainer's copies, and the plan and every offset stay as they were.
// An encoded chunk also writes its place's last block (zeros), so every
// file still reaches its planned size (replicas and parity copy files to
// that size); the blocks between are a hole.
//
// Thread-safety: Submit may be called from any thread.
#ifndef CKPT_DAEMON_EXEC_WRITER_POOL_H_
#define CKPT_DAEMON_EXEC_WRITER_POOL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "ckpt/v1/manifest.pb.h"
#include "daemon/codec/chunk_codec.h"
#include "daemon/storage/backend.h"
#include "daemon/storage/chunk_reader.h"

namespace ckpt::exec {

// Where a save's step deltas take their base chunks from: the base step's
// directory in the store the save writes to.
struct DeltaSource {
  storage::Backend* backend = nullptr;
  std::string dir;
  int64_t step = 0;
  uint32_t ordinal = 0;  // the save is the n-th delta against that step
};

struct WrittenChunk {
  uint64_t tag = 0;  // the task's, for the sink's bookkeeping
  int file = 0;
  uint64_t file_offset = 0;
  uint64_t payload = 0;  // raw bytes
  uint32_t crc32c = 0;   // of the raw bytes
  // How it was stored: kNone (stored_length and stored_crc32c unset) when
  // the task asked for none or encoding did not pay.
  codec::Codec codec = codec::Codec::kNone;
  uint64_t stored_length = 0;
  uint32_t stored_crc32c = 0;
  int element_bytes = 1;
  // Stored as a delta against this chunk of step delta_base_step.
  std::shared_ptr<const v1::StoredChunk> delta_base;
  int64_t delta_base_step = 0;
  uint32_t delta_ordinal = 0;
};

// The receiver of a save's chunk writes (SaveSession).
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual storage::WritableFile* File(int index) = 0;
  // True once the save failed: its remaining chunks are skipped.
  virtual bool Abandoned() = 0;
  // Called once per batch, from the writer thread.
  virtual void OnChunksWritten(absl::Span<const WrittenChunk> chunks, absl::Status status) = 0;
};

struct WriteTask {
  std::shared_ptr<ChunkSink> sink;
  int file = 0;
  uint64_t file_offset = 0;
  const char* data = nullptr;  // in the pool, aligned
  uint64_t length = 0;         // aligned: what is written
  uint64_t payload = 0;        // what the CRC covers
  uint64_t tag = 0;            // the sink's (which pool batch the chunk is in)
  codec::Codec codec = codec::Codec::kNone;
  int element_bytes = 1;   // of the chunk's dtype (grouped-zstd's planes)
  uint64_t alignment = 1;  // what `length` was rounded to (O_DIRECT's block)
  // A step delta, where the save found the same place in its base step:
  // the chunk is stored as the XOR with that chunk's raw bytes, encoded,
  // when that saves the codec's margin over the raw chunk.
  std::shared_ptr<const v1::StoredChunk> delta_base;
  std::shared_ptr<const DeltaSource> delta_source;
};

class WriterPool {
 public:
  // `nice` lowers the writers' CPU priority: persisting is background work,
  // and on a busy host the ranks' snapshot copies (what the trainer waits
  // for) should win the cores.
  // `prepare` runs first on every writer (the storage's per-thread set-up,
  // Backend::PrepareThread); the constructor returns once all have run it.
  WriterPool(int threads, unsigned max_batch, int nice = 0,
             std::function<void()> prepare = nullptr);
  ~WriterPool();  // drains nothing: sinks must not be waiting on it
  int threads() const { return static_cast<int>(workers_.size()); }
  void Submit(int writer, std::vector<WriteTask> tasks);
  // Chunks submitted and not yet written, over every thread (a metric).
  uint64_t queued_chunks() const { return queued_.load(std::memory_order_relaxed); }

 private:
  struct Queue {
    absl::Mutex mu;
    std::deque<WriteTask> tasks ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
  };
  void Run(Queue& queue);
  void WriteGroup(std::vector<WriteTask>& group);
  // Encodes the tasks that ask for it and writes them all, in batches whose
  // encoded bytes fit this thread's scratch; fills `written`.
  absl::Status EncodeAndWrite(storage::WritableFile& file, const std::vector<WriteTask>& group,
                              std::vector<WrittenChunk>& written);
  // The XOR of the task's chunk with its delta base's raw bytes, into
  // `xored` (room for the payload); false when the base cannot be read
  // (the chunk is then stored whole), and from then on for the group
  // (`base_failed`). `reader` is opened on first use.
  static bool DeltaOf(const WriteTask& task, std::unique_ptr<storage::ChunkReader>& reader,
                      bool& base_failed, char* xored);

  const unsigned max_batch_;
  std::atomic<uint64_t> queued_{0};
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<std::thread> workers_;
};

}  // namespace ckpt::exec

#endif  // CKPT_DAEMON_EXEC_WRITER_POOL_H_
