// The writer pool's encoding (docs/compression.md): every chunk of a group
// is reported back exactly once, encoded or not, written or not; encoded
// chunks decode to their bytes and files keep their planned size; and a
// disk that fills up part way through a group (its encoded bytes are
// written in several batches) still reports every chunk, with the error,
// so the save counts them all back and cleans up.
#include "daemon/exec/writer_pool.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/codec/chunk_codec.h"
#include "daemon/storage/fault_injection.h"
#include "daemon/storage/memory/memory_backend.h"
#include "proto/lib/crc32c.h"
#include "tests/catch.h"

namespace ckpt::exec {
namespace {

constexpr uint64_t kChunk = 4 << 20;
constexpr uint64_t kAlign = 4096;

struct Sink : ChunkSink {
  std::unique_ptr<storage::WritableFile> file;
  absl::Mutex mu;
  std::vector<WrittenChunk> written ABSL_GUARDED_BY(mu);
  absl::Status status ABSL_GUARDED_BY(mu);
  storage::WritableFile* File(int) override { return file.get(); }
  bool Abandoned() override { return false; }
  void OnChunksWritten(absl::Span<const WrittenChunk> chunks, absl::Status s) override {
    absl::MutexLock lock(&mu);
    written.insert(written.end(), chunks.begin(), chunks.end());
    if (status.ok()) status = s;
  }
  size_t Count() {
    absl::MutexLock lock(&mu);
    return written.size();
  }
};

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};

// Chunks of small random floats: grouped-zstd shrinks them by about a fifth.
std::unique_ptr<char, AlignedFree> Floats(uint64_t bytes) {
  void* p = nullptr;
  REQUIRE(posix_memalign(&p, kAlign, bytes) == 0);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  float* f = static_cast<float*>(p);
  for (uint64_t i = 0; i < bytes / 4; ++i) f[i] = normal(rng);
  return std::unique_ptr<char, AlignedFree>(static_cast<char*>(p));
}

std::vector<WriteTask> Tasks(const std::shared_ptr<Sink>& sink, const char* data, int chunks) {
  std::vector<WriteTask> tasks;
  for (int i = 0; i < chunks; ++i) {
    WriteTask t;
    t.sink = sink;
    t.file_offset = i * kChunk;
    t.data = data + i * kChunk;
    t.length = kChunk;
    t.payload = kChunk;
    t.tag = static_cast<uint64_t>(i);
    t.codec = codec::Codec::kGroupedZstd;
    t.element_bytes = 4;
    t.alignment = kAlign;
    tasks.push_back(std::move(t));
  }
  return tasks;
}

void WaitFor(Sink& sink, size_t n) {
  std::pair<Sink*, size_t> until(&sink, n);
  absl::MutexLock lock(&sink.mu);
  // Bounded: a writer that loses a chunk's report fails here, not hangs.
  sink.mu.AwaitWithTimeout(absl::Condition(
                               +[](std::pair<Sink*, size_t>* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
                                    a->first->mu) { return a->first->written.size() >= a->second; },
                               &until),
                           absl::Minutes(2));
}

}  // namespace

TEST_CASE("encoded chunks decode to their bytes; the file keeps its planned size",
          "[writers][codec]") {
  storage::MemoryBackend backend;
  auto sink = std::make_shared<Sink>();
  sink->file = *backend.NewWritableFile("/f");
  constexpr int kChunks = 4;
  auto data = Floats(kChunks * kChunk);
  {
    WriterPool pool(1, 64);
    pool.Submit(0, Tasks(sink, data.get(), kChunks));
    WaitFor(*sink, kChunks);
  }
  absl::MutexLock lock(&sink->mu);
  REQUIRE(sink->status.ok());
  std::unique_ptr<storage::ReadableFile> in = *backend.NewReadableFile("/f");
  CHECK(*in->Size() == kChunks * kChunk);  // the last chunk's place ends the file
  for (const WrittenChunk& w : sink->written) {
    INFO("chunk at " << w.file_offset);
    REQUIRE(w.codec == codec::Codec::kGroupedZstd);
    CHECK(w.stored_length < kChunk * 9 / 10);
    CHECK(w.crc32c == Crc32c(data.get() + w.file_offset, kChunk));
    std::string stored(w.stored_length, '\0');
    REQUIRE(*in->ReadAt(w.file_offset, stored.data(), stored.size()) == stored.size());
    CHECK(Crc32c(stored.data(), stored.size()) == w.stored_crc32c);
    std::vector<char> raw(kChunk);
    REQUIRE(codec::DecodeChunk(w.codec, 4, stored, absl::MakeSpan(raw)).ok());
    CHECK(std::memcmp(raw.data(), data.get() + w.file_offset, kChunk) == 0);
  }
}

TEST_CASE("a disk that fills mid-group still reports every chunk, with the error",
          "[writers][codec]") {
  storage::MemoryBackend memory;
  storage::FaultInjectionBackend backend(&memory);
  auto sink = std::make_shared<Sink>();
  sink->file = *backend.NewWritableFile("/f");
  // More encoded bytes than a writer's 64 MiB scratch: written in batches,
  // and the disk is full before the first batch is.
  constexpr int kChunks = 24;
  auto data = Floats(kChunks * kChunk);
  backend.SetWriteBudget(8 << 20);
  {
    WriterPool pool(1, 64);
    pool.Submit(0, Tasks(sink, data.get(), kChunks));
    WaitFor(*sink, kChunks);
  }
  absl::MutexLock lock(&sink->mu);
  CHECK(sink->written.size() == kChunks);
  CHECK(absl::IsResourceExhausted(sink->status));
  std::vector<bool> seen(kChunks, false);
  for (const WrittenChunk& w : sink->written) seen[w.tag] = true;
  CHECK(std::find(seen.begin(), seen.end(), false) == seen.end());
}

}  // namespace ckpt::exec
