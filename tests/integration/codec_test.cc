// Chunk codecs end to end (docs/compression.md): ranks save every dtype,
// special values included (NaN payloads, infinities, denormals, -0.0),
// through each codec to a real ckptd, load them back under another
// sharding and compare every byte; the manifest records what the writers
// stored; a flipped byte of an encoded chunk, and encoded bytes that pass
// their checksum but do not decode, fail the load naming the chunk.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ckpt/client.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "daemon/planning/manifest_io.h"
#include "proto/lib/crc32c.h"
#include "proto/lib/stored_chunk.h"
#include "tests/catch.h"
#include "tests/support/file_bytes.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

constexpr int64_t kRows = 64;
constexpr int64_t kRowBytes = 4096;
// Small chunks: each shard is many, so loads read some and not others.
const std::string kChunkFlag = "--chunk_bytes=16384";

struct DTypeCase {
  DType dtype;
  int width;
  std::vector<uint64_t> specials;  // bit patterns of the element's width
};

// Every dtype, with the bit patterns a codec must carry untouched.
std::vector<DTypeCase> AllDTypes() {
  const std::vector<uint64_t> f32 = {0x7fc00001, 0xffa00005, 0x7f800000, 0xff800000,
                                     0x00000001, 0x80000000, 0x807fffff};
  const std::vector<uint64_t> f16 = {0x7e01, 0xfc01, 0x7c00, 0xfc00, 0x0001, 0x8000, 0x83ff};
  const std::vector<uint64_t> bf16 = {0x7fc1, 0xff81, 0x7f80, 0xff80, 0x0001, 0x8000, 0x807f};
  const std::vector<uint64_t> f64 = {0x7ff8000000000001, 0xfff0000000000001, 0x7ff0000000000000,
                                     0xfff0000000000000, 0x0000000000000001, 0x8000000000000000};
  const std::vector<uint64_t> f8 = {0x7f, 0xff, 0x7c, 0xfc, 0x01, 0x80};
  return {{DType::kFloat32, 4, f32},
          {DType::kFloat16, 2, f16},
          {DType::kBFloat16, 2, bf16},
          {DType::kFloat64, 8, f64},
          {DType::kInt8, 1, {0x80, 0x7f}},
          {DType::kUInt8, 1, {0xff, 0x00}},
          {DType::kInt16, 2, {0x8000}},
          {DType::kInt32, 4, {0x80000000}},
          {DType::kInt64, 8, {0x8000000000000000}},
          {DType::kBool, 1, {0x01}},
          {DType::kFloat8E4M3, 1, f8},
          {DType::kFloat8E5M2, 1, f8}};
}

// Bytes like trained weights' (small values of one scale, so the high
// bytes repeat and compress) with the special patterns every 61 elements.
std::vector<char> Fill(const DTypeCase& c, uint32_t seed) {
  std::vector<char> bytes(kRows * kRowBytes);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const size_t n = bytes.size() / c.width;
  for (size_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    if (i % 61 == 0) {
      v = c.specials[(i / 61) % c.specials.size()];
    } else {
      const float f = normal(rng);
      uint32_t f32 = 0;
      std::memcpy(&f32, &f, 4);
      const double d = f;
      uint64_t f64 = 0;
      std::memcpy(&f64, &d, 8);
      switch (c.width) {
        case 1:
          v = rng() % 5;
          break;
        case 2:
          v = f32 >> 16;  // bf16's bits; as f16 or int16 as compressible
          break;
        case 4:
          v = f32;
          break;
        default:
          v = f64;
      }
    }
    std::memcpy(bytes.data() + i * c.width, &v, c.width);  // little-endian
  }
  return bytes;
}

std::string Name(const DTypeCase& c) { return absl::StrCat("t", static_cast<int>(c.dtype)); }

std::vector<int64_t> Shape(const DTypeCase& c) { return {kRows, kRowBytes / c.width}; }

// Two ranks save rows [0, 32) and [32, 64) of every tensor, plus a
// compressible global object and a rank's own incompressible one.
void SaveAll(const TestDaemon& d, const std::string& job, int64_t step, const std::string& codec,
             const std::map<DType, std::vector<char>>& data, Tier tier = Tier::kDurable,
             int delta_every = 0) {
  std::vector<std::thread> ranks;
  std::vector<absl::Status> results(2);
  std::vector<std::unique_ptr<Client>> clients;
  for (int r = 0; r < 2; ++r) clients.push_back(AttachRank(d, job, r, 2));
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      std::vector<HostTensor> tensors;
      for (const DTypeCase& c : AllDTypes()) {
        const char* base = data.at(c.dtype).data() + r * (kRows / 2) * kRowBytes;
        tensors.push_back({Name(c), c.dtype, Shape(c),
                           Region::Box({r * kRows / 2, 0}, {kRows / 2, Shape(c)[1]}),
                           const_cast<char*>(base)});
      }
      std::string noise(8192, '\0');
      std::mt19937 rng(r);
      for (char& ch : noise) ch = static_cast<char>(rng());
      std::vector<SaveObject> objects = {{"noise", false, noise}};
      if (r == 0) objects.push_back({"text", true, std::string(100000, 'a') + "end"});
      SaveOptions options;
      options.codec = codec;
      options.tier = tier;
      options.delta_every = delta_every;
      absl::StatusOr<std::shared_ptr<SaveHandle>> handle =
          clients[r]->Save(step, std::move(tensors), std::move(objects), options);
      results[r] = handle.ok() ? (*handle)->WaitPersisted() : handle.status();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const absl::Status& s : results) {
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
}

// One rank loads rows [5, 59) of every tensor: a resharding load that
// reads some chunks of each saved shard and not others.
absl::Status LoadRows(const TestDaemon& d, const std::string& job, int64_t step,
                      std::map<DType, std::vector<char>>& out, LoadOptions::From from) {
  std::unique_ptr<Client> client = AttachRank(d, job, 0, 1);
  std::vector<HostTensor> tensors;
  for (const DTypeCase& c : AllDTypes()) {
    std::vector<char>& bytes = out[c.dtype];
    bytes.assign((kRows - 10) * kRowBytes, '\x5a');
    tensors.push_back(
        {Name(c), c.dtype, Shape(c), Region::Box({5, 0}, {kRows - 10, Shape(c)[1]}), bytes.data()});
  }
  LoadOptions options;
  options.from = from;
  return client->Load(step, tensors, {}, options).status();
}

// The load of rows [5, 59) fails DATA_LOSS, its message naming each of `says`.
void RequireLoadLost(const TestDaemon& d, const std::string& job, int64_t step,
                     const std::vector<std::string>& says) {
  std::map<DType, std::vector<char>> loaded;
  const absl::Status s = LoadRows(d, job, step, loaded, LoadOptions::From::kAny);
  INFO(s.ToString());
  CHECK(absl::IsDataLoss(s));
  for (const std::string& what : says) CHECK(absl::StrContains(s.message(), what));
}

std::map<DType, std::vector<char>> MakeData() {
  std::map<DType, std::vector<char>> data;
  uint32_t seed = 1;
  for (const DTypeCase& c : AllDTypes()) data[c.dtype] = Fill(c, seed++);
  return data;
}

void RequireRows(const std::map<DType, std::vector<char>>& saved,
                 const std::map<DType, std::vector<char>>& loaded) {
  for (const DTypeCase& c : AllDTypes()) {
    INFO("dtype " << static_cast<int>(c.dtype));
    const std::vector<char>& want = saved.at(c.dtype);
    const std::vector<char> rows(want.begin() + 5 * kRowBytes, want.end() - 5 * kRowBytes);
    REQUIRE(loaded.at(c.dtype) == rows);
  }
}

struct Encoded {
  int chunks = 0;
  int encoded = 0;
  uint64_t raw = 0;
  uint64_t stored = 0;
  const v1::StoredChunk* first = nullptr;  // an encoded tensor chunk loads read
};

Encoded CountEncoded(const v1::CheckpointManifest& m) {
  Encoded e;
  auto add = [&](const v1::StoredChunk& c) {
    ++e.chunks;
    e.raw += c.length();
    if (c.codec() == v1::CHUNK_CODEC_NONE) {
      e.stored += c.length();
      return;
    }
    ++e.encoded;
    e.stored += c.stored_length();
  };
  for (const v1::TensorEntry& t : m.tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) {
        add(c);
        // One the loads below read (rows [5, 59) of the tensor).
        const bool read =
            c.shard_offset() >= 6 * kRowBytes && c.shard_offset() + c.length() <= 26 * kRowBytes;
        if (c.codec() != v1::CHUNK_CODEC_NONE && read && e.first == nullptr) e.first = &c;
      }
    }
  }
  for (const v1::ObjectEntry& o : m.objects()) add(o.chunk());
  return e;
}

// Bytes the data files hold on disk (st_blocks): encoded chunks leave holes.
uint64_t DiskBytes(const std::string& step_dir, const v1::CheckpointManifest& m) {
  std::set<std::string> files;
  for (const v1::TensorEntry& t : m.tensors())
    for (const v1::StoredShard& s : t.shards())
      for (const v1::StoredChunk& c : s.chunks()) files.insert(c.file());
  uint64_t bytes = 0;
  for (const std::string& f : files) {
    struct stat st;
    REQUIRE(stat((step_dir + "/" + f).c_str(), &st) == 0);
    bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

}  // namespace

TEST_CASE("every dtype round-trips bit-exact through each codec, resharded",
          "[integration][codec]") {
  const std::string codec = GENERATE(as<std::string>{}, "none", "zstd", "grouped-zstd");
  INFO("codec " << codec);
  TestDaemon d;
  REQUIRE(d.Start({kChunkFlag}).ok());
  const std::map<DType, std::vector<char>> data = MakeData();
  SaveAll(d, "codecs", 7, codec, data);

  const v1::CheckpointManifest manifest = InspectManifest(d, "codecs", 7);
  const Encoded e = CountEncoded(manifest);
  if (codec == "none") {
    CHECK(e.encoded == 0);
  } else {
    // The incompressible object stays raw; nearly all else shrinks.
    CHECK(e.encoded >= e.chunks - 2);
    CHECK(e.stored < e.raw * 0.8);
    for (const v1::TensorEntry& t : manifest.tensors()) {
      for (const v1::StoredShard& s : t.shards()) {
        for (const v1::StoredChunk& c : s.chunks()) {
          if (c.codec() == v1::CHUNK_CODEC_NONE) continue;
          CHECK(c.codec() ==
                (codec == "zstd" ? v1::CHUNK_CODEC_ZSTD : v1::CHUNK_CODEC_GROUPED_ZSTD));
          CHECK(c.stored_length() < c.length());
        }
      }
    }
    for (const v1::ObjectEntry& o : manifest.objects()) {
      CHECK((o.key() == "text") == (o.chunk().codec() != v1::CHUNK_CODEC_NONE));
    }
    // The holes are real: the files hold less than the raw bytes on disk.
    CHECK(DiskBytes(d.root() + "/codecs/step-7", manifest) < e.raw * 0.9);
  }

  std::map<DType, std::vector<char>> loaded;
  const absl::Status s = LoadRows(d, "codecs", 7, loaded, LoadOptions::From::kAny);
  INFO(s.ToString());
  REQUIRE(s.ok());
  RequireRows(data, loaded);

  // Objects too, and ckptctl verify checks the stored bytes.
  std::unique_ptr<Client> client = AttachRank(d, "codecs", 0, 1);
  std::string text, noise;
  REQUIRE(client->Load(7, {}, {{"text", &text}, {"noise", &noise}}).ok());
  CHECK(text == std::string(100000, 'a') + "end");
  CHECK(noise.size() == 8192);
  ExitInfo verify = d.Ckptctl({"verify", "codecs", "7"});
  INFO(verify.output);
  CHECK(verify.ok());
}

TEST_CASE("a save asks for an unknown codec, or ranks disagree: named errors",
          "[integration][codec]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  std::vector<float> w(1024, 0.5f);
  std::unique_ptr<Client> client = AttachRank(d, "bad", 0, 1);
  SaveOptions options;
  options.codec = "lz4";
  absl::StatusOr<std::shared_ptr<SaveHandle>> h =
      client->Save(1, {{"w", DType::kFloat32, {1024}, Region::Whole(), w.data()}}, {}, options);
  const absl::Status s = h.ok() ? (*h)->WaitPersisted() : h.status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK(absl::StrContains(s.message(), "codec \"lz4\""));
  // The daemon serves the next save.
  options.codec = "grouped-zstd";
  h = client->Save(2, {{"w", DType::kFloat32, {1024}, Region::Whole(), w.data()}}, {}, options);
  REQUIRE(h.ok());
  CHECK((*h)->WaitPersisted().ok());
  CHECK_FALSE(d.Start({"--codec=brotli"}).ok());
}

TEST_CASE("the memory tier holds encoded chunks and persists them as they are",
          "[integration][codec]") {
  TestDaemon d;
  REQUIRE(d.Start({kChunkFlag, "--memory_tier_bytes=67108864", "--codec=grouped-zstd"}).ok());
  const std::map<DType, std::vector<char>> data = MakeData();
  // No codec asked: the daemon's --codec.
  SaveAll(d, "mem", 3, "", data, Tier::kMemoryAndDurable);
  // WaitPersisted returned at the memory commit; the durable copy follows
  // in the background.
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 1; }));
  for (LoadOptions::From from : {LoadOptions::From::kMemory, LoadOptions::From::kDurable}) {
    INFO("from " << static_cast<int>(from));
    std::map<DType, std::vector<char>> loaded;
    const absl::Status s = LoadRows(d, "mem", 3, loaded, from);
    INFO(s.ToString());
    REQUIRE(s.ok());
    RequireRows(data, loaded);
  }
  const v1::CheckpointManifest manifest = InspectManifest(d, "mem", 3);
  CHECK(CountEncoded(manifest).encoded > 0);
  ExitInfo verify = d.Ckptctl({"verify", "mem", "3"});
  INFO(verify.output);
  CHECK(verify.ok());
}

TEST_CASE("a damaged encoded chunk fails the load naming it", "[integration][codec]") {
  TestDaemon d;
  REQUIRE(d.Start({kChunkFlag}).ok());
  const std::map<DType, std::vector<char>> data = MakeData();
  SaveAll(d, "hurt", 5, "grouped-zstd", data);
  const std::string step_dir = d.root() + "/hurt/step-5";
  v1::CheckpointManifest manifest = InspectManifest(d, "hurt", 5);
  const Encoded e = CountEncoded(manifest);
  REQUIRE(e.first != nullptr);
  const v1::StoredChunk chunk = *e.first;
  std::string owner;
  for (const v1::TensorEntry& t : manifest.tensors())
    for (const v1::StoredShard& s : t.shards())
      for (const v1::StoredChunk& c : s.chunks())
        if (c.file() == chunk.file() && c.file_offset() == chunk.file_offset()) owner = t.fqn();
  const std::string where = absl::StrCat(chunk.file(), " at offset ", chunk.file_offset());

  SECTION("a flipped stored byte: its stored checksum names it") {
    FlipByte(step_dir + "/" + chunk.file(), chunk.file_offset() + chunk.stored_length() / 2, 0x10);
    RequireLoadLost(d, "hurt", 5, {where, owner, "step-5", "grouped-zstd-encoded"});
    ExitInfo verify = d.Ckptctl({"verify", "hurt", "5"});
    CHECK_FALSE(verify.ok());
    CHECK(absl::StrContains(verify.output, chunk.file()));
  }

  SECTION("bytes that pass their checksum but do not decode") {
    // A manifest that vouches for damaged bytes (their CRC recorded), so
    // the decoder itself must refuse them; the daemon restarts to read it.
    const std::string file = step_dir + "/" + chunk.file();
    FlipByte(file, chunk.file_offset() + 1, 0x10);  // inside the zstd frame header
    std::ifstream in(file, std::ios::binary);
    std::string stored(chunk.stored_length(), '\0');
    in.seekg(static_cast<std::streamoff>(chunk.file_offset()));
    in.read(stored.data(), static_cast<std::streamsize>(stored.size()));
    REQUIRE(in.good());
    REQUIRE(planning::ForEachMutableChunk(manifest, [&](v1::StoredChunk& c, const std::string&) {
              if (c.file() == chunk.file() && c.file_offset() == chunk.file_offset())
                c.set_stored_crc32c(Crc32c(stored.data(), stored.size()));
              return absl::OkStatus();
            }).ok());
    d.Kill();
    {
      std::ofstream out(step_dir + "/MANIFEST", std::ios::binary | std::ios::trunc);
      const std::string encoded = planning::EncodeManifest(manifest);
      out.write(encoded.data(), static_cast<std::streamsize>(encoded.size()));
    }
    REQUIRE(d.Start({kChunkFlag}).ok());
    RequireLoadLost(d, "hurt", 5, {where, "do not decode"});
  }
}

namespace {

// One optimizer step's worth of change: the low byte of a quarter of the
// elements (an element's lowest mantissa bits, for floats), the special
// values left as they are.
void Train(std::map<DType, std::vector<char>>& data, uint32_t seed) {
  std::mt19937 rng(seed);
  for (const DTypeCase& c : AllDTypes()) {
    std::vector<char>& bytes = data[c.dtype];
    const size_t n = bytes.size() / c.width;
    for (size_t i = 0; i < n; ++i) {
      if (i % 61 == 0 || rng() % 4 != 0) continue;
      bytes[i * c.width] = static_cast<char>(bytes[i * c.width] ^ (1 + rng() % 255));
    }
  }
}

std::string Ctl(TestDaemon& d, const std::vector<std::string>& args) {
  ExitInfo e = d.Ckptctl(args);
  INFO(e.output);
  REQUIRE(e.ok());
  return e.output;
}

}  // namespace

TEST_CASE("steps stored as deltas against a full step every K load bit-exact, resharded",
          "[integration][codec][delta]") {
  TestDaemon d;
  REQUIRE(d.Start({kChunkFlag, "--delta_every=4"}).ok());
  std::map<DType, std::vector<char>> data = MakeData();
  std::map<int64_t, std::map<DType, std::vector<char>>> saved;
  for (int64_t step = 1; step <= 10; ++step) {
    Train(data, static_cast<uint32_t>(step));
    SaveAll(d, "deltas", step, "", data);
    saved[step] = data;
    const v1::CheckpointManifest m = InspectManifest(d, "deltas", step);
    const int64_t base = (step - 1) / 4 * 4 + 1;  // 1, 5, 9 are full
    INFO("step " << step);
    if (step == base) {
      CHECK_FALSE(m.has_delta_base_step());
      continue;
    }
    REQUIRE(m.has_delta_base_step());
    CHECK(m.delta_base_step() == base);
    int deltas = 0;
    for (const v1::TensorEntry& t : m.tensors())
      for (const v1::StoredShard& s : t.shards())
        for (const v1::StoredChunk& c : s.chunks()) deltas += c.has_delta_base() ? 1 : 0;
    CHECK(deltas > 0);
    // A delta of steps apart stores far less than the step.
    const Encoded e = CountEncoded(m);
    CHECK(e.stored < e.raw / 2);
  }
  for (int64_t step = 1; step <= 10; ++step) {
    INFO("step " << step);
    std::map<DType, std::vector<char>> loaded;
    const absl::Status s = LoadRows(d, "deltas", step, loaded, LoadOptions::From::kAny);
    INFO(s.ToString());
    REQUIRE(s.ok());
    RequireRows(saved[step], loaded);
  }
  // The chain is listed; ckptctl verify checks each step's stored bytes.
  const std::string list = Ctl(d, {"list", "deltas"});
  CHECK(absl::StrContains(list, "delta of 1"));
  CHECK(absl::StrContains(list, "delta of 9"));
  Ctl(d, {"verify", "deltas", "10"});

  // gc keeping the newest step keeps its base too.
  Ctl(d, {"gc", "deltas", "--keep-last", "1", "--grace-s", "0"});
  grpc::ClientContext context;
  v1::ListCheckpointsRequest request;
  request.set_job("deltas");
  v1::ListCheckpointsResponse listed;
  REQUIRE(d.Stub()->ListCheckpoints(&context, request, &listed).ok());
  std::set<int64_t> left;
  for (const v1::CheckpointSummary& c : listed.checkpoints()) left.insert(c.step());
  CHECK(left == std::set<int64_t>{9, 10});
  std::map<DType, std::vector<char>> loaded;
  REQUIRE(LoadRows(d, "deltas", 10, loaded, LoadOptions::From::kAny).ok());
  RequireRows(saved[10], loaded);

  // Another layout matches nothing of the base: stored whole, the next base.
  std::unique_ptr<Client> client = AttachRank(d, "deltas", 0, 1);
  std::vector<float> w(50000, 0.25f);
  for (int64_t step : {11, 12}) {
    absl::StatusOr<std::shared_ptr<SaveHandle>> h =
        client->Save(step, {{"other", DType::kFloat32, {50000}, Region::Whole(), w.data()}}, {});
    REQUIRE(h.ok());
    REQUIRE((*h)->WaitPersisted().ok());
    w[step] = 1.0f;
  }
  CHECK_FALSE(InspectManifest(d, "deltas", 11).has_delta_base_step());
  CHECK(InspectManifest(d, "deltas", 12).delta_base_step() == 11);
  std::vector<float> back(50000, 0.0f);
  REQUIRE(
      client->Load(12, {{"other", DType::kFloat32, {50000}, Region::Whole(), back.data()}}).ok());
  w[12] = 0.25f;  // step 12 was saved before this element changed
  CHECK(back == w);
}

TEST_CASE("a delta whose base is missing or damaged fails the load naming both",
          "[integration][codec][delta]") {
  TestDaemon d;
  REQUIRE(d.Start({kChunkFlag}).ok());
  std::map<DType, std::vector<char>> data = MakeData();
  for (int64_t step = 1; step <= 2; ++step) {
    Train(data, static_cast<uint32_t>(step));
    // Asked per save this time (the daemon's default is every step whole).
    SaveAll(d, "broken", step, "", data, Tier::kDurable, /*delta_every=*/3);
  }
  const v1::CheckpointManifest m = InspectManifest(d, "broken", 2);
  REQUIRE(m.delta_base_step() == 1);
  const v1::StoredChunk* delta = nullptr;
  for (const v1::TensorEntry& t : m.tensors())
    for (const v1::StoredShard& s : t.shards())
      for (const v1::StoredChunk& c : s.chunks())
        if (c.has_delta_base() && c.shard_offset() >= 6 * kRowBytes &&
            c.shard_offset() + c.length() <= 26 * kRowBytes && delta == nullptr)
          delta = &c;
  REQUIRE(delta != nullptr);
  const std::string where = absl::StrCat(delta->file(), " at offset ", delta->file_offset());

  // Every delta chunk's base is gone, and the first read is named; a
  // damaged one is the chunk whose base it is.
  std::string named = "step-2/" + delta->file() + " at offset ";
  SECTION("its base step removed") {
    std::filesystem::remove_all(d.root() + "/broken/step-1");
    // ckptctl verify says so too.
    ExitInfo verify = d.Ckptctl({"verify", "broken", "2"});
    CHECK_FALSE(verify.ok());
    CHECK(absl::StrContains(verify.output, "stored as deltas against step 1"));
  }
  SECTION("its base chunk damaged") {
    const v1::StoredChunk& base = delta->delta_base();
    FlipByte(d.root() + "/broken/step-1/" + base.file(),
             base.file_offset() + StoredLength(base) / 2, 0x10);
    named = where;
  }
  RequireLoadLost(d, "broken", 2, {named, "a delta against step 1"});
}

}  // namespace ckpt::testing
