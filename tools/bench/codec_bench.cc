#include "tools/bench/codec_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/codec/chunk_codec.h"
#include "daemon/codec/step_delta.h"
#include "proto/lib/dtype.h"
#include "tools/bench/synthetic_model.h"
#include "tools/bench/worker_loop.h"
#include "tools/ckptctl/safetensors.h"

namespace ckpt::bench {
namespace {

using codec::Codec;

constexpr uint64_t kChunkBytes = 4 << 20;  // ckptd's default chunk

// One chunk's worth of parameters of each kind, at two consecutive steps.
struct ChunkPair {
  std::vector<char> bf16[2], master[2], m[2], v[2];
};

ChunkPair MakeChunks(SyntheticModel& rng, uint64_t params, uint64_t tensor) {
  ChunkPair p;
  const float scale = rng.Scale(tensor);
  const bool norm = tensor % 8 == 7;
  for (int s = 0; s < 2; ++s) {
    p.bf16[s].resize(params * 2);
    p.master[s].resize(params * 4);
    p.m[s].resize(params * 4);
    p.v[s].resize(params * 4);
  }
  for (uint64_t i = 0; i < params; ++i) {
    const float w = (norm ? 1.0f : 0.0f) + scale * rng.Normal();
    const float g0 = 1e-3f * rng.Normal(), g1 = 1e-3f * rng.Normal();
    const float m0 = 0.1f * g0, v0 = 0.001f * g0 * g0 + 1e-8f;
    const float m1 = 0.9f * m0 + 0.1f * g1, v1 = 0.999f * v0 + 0.001f * g1 * g1;
    const float w1 = w - 1e-4f * rng.Normal();
    const float values[2][3] = {{w, m0, v0}, {w1, m1, v1}};
    for (int s = 0; s < 2; ++s) {
      const uint16_t b = Bf16(values[s][0]);
      std::memcpy(p.bf16[s].data() + 2 * i, &b, 2);
      std::memcpy(p.master[s].data() + 4 * i, &values[s][0], 4);
      std::memcpy(p.m[s].data() + 4 * i, &values[s][1], 4);
      std::memcpy(p.v[s].data() + 4 * i, &values[s][2], 4);
    }
  }
  return p;
}

// Stored bytes of raw under codec (raw's size when it stays raw), and the
// seconds the encode and a decode took.
struct Coded {
  uint64_t raw = 0, stored = 0;
  double encode_s = 0, decode_s = 0;
  void Add(const Coded& o) {
    raw += o.raw;
    stored += o.stored;
    encode_s += o.encode_s;
    decode_s += o.decode_s;
  }
  double ratio() const { return stored == 0 ? 0 : double(raw) / double(stored); }
};

absl::StatusOr<Coded> Code(Codec codec, int width, const std::vector<char>& raw) {
  Coded c;
  c.raw = raw.size();
  std::string stored;
  auto start = Clock::now();
  absl::StatusOr<Codec> used = codec::EncodeChunk(codec, width, raw, {}, &stored);
  c.encode_s = Since(start);
  if (!used.ok()) return used.status();
  c.stored = *used == Codec::kNone ? raw.size() : stored.size();
  if (*used != Codec::kNone) {
    std::vector<char> back(raw.size());
    start = Clock::now();
    absl::Status s = codec::DecodeChunk(*used, width, stored, absl::MakeSpan(back));
    c.decode_s = Since(start);
    if (!s.ok()) return s;
    if (back != raw) return absl::InternalError("a chunk did not decode to its bytes");
  }
  return c;
}

// Prints the figures, the goals it has figures for and (json) one line.
void Report(const Config& c, const std::string& mode, const std::map<std::string, double>& f) {
  PrintFigures(f);
  std::vector<Goal> goals;
  for (const auto& [name, limit] :
       {std::pair{"grouped_zstd_ratio_bf16", 1.4}, std::pair{"grouped_zstd_ratio_fp32", 1.15},
        std::pair{"delta_ratio_bf16", 2.0}}) {
    auto it = f.find(name);
    if (it != f.end()) goals.push_back({name, it->second, limit});
  }

  PrintGoals(goals);
  if (c.json) {
    std::string head = absl::StrFormat("\"mode\":\"%s\"", mode);
    if (c.codec_files.empty()) absl::StrAppendFormat(&head, ",\"state_gib\":%.3f", c.state_gib);
    PrintJsonLine(head, f);
  }
}

// A safetensors file's tensors by name, and its bytes.
struct TensorFile {
  std::string bytes;
  std::map<std::string, ctl::SafetensorsTensor> tensors;
};

absl::StatusOr<TensorFile> ReadTensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  TensorFile file;
  file.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  absl::StatusOr<std::vector<ctl::SafetensorsTensor>> parsed =
      ctl::ParseSafetensorsHeader(file.bytes, file.bytes.size(), path);
  if (!parsed.ok()) return parsed.status();
  for (ctl::SafetensorsTensor& t : *parsed) file.tensors[t.name] = std::move(t);
  return file;
}

// "bf16" for BF16 and F16, "fp32" for F32, else "int<bits>".
std::string Family(v1::DType dtype, int64_t width) {
  if (dtype == v1::BFLOAT16 || dtype == v1::FLOAT16) return "bf16";
  if (dtype == v1::FLOAT32) return "fp32";
  return absl::StrCat("int", width * 8);
}

// The codecs on real tensors: each tensor of the first file in 4 MiB
// chunks, and, where the second file has the same tensor (name, dtype,
// shape), that tensor as its XOR against the first.
int RunCodecFiles(const Config& c) {
  absl::StatusOr<TensorFile> now = ReadTensors(c.codec_files[0]);
  if (!now.ok()) {
    absl::FPrintF(stderr, "ckpt-bench: %s\n", now.status().ToString());
    return 1;
  }
  absl::StatusOr<TensorFile> next = absl::NotFoundError("no next step");
  if (c.codec_files.size() > 1) {
    next = ReadTensors(c.codec_files[1]);
    if (!next.ok()) {
      absl::FPrintF(stderr, "ckpt-bench: %s\n", next.status().ToString());
      return 1;
    }
  }
  std::map<std::string, Coded> by;
  for (const auto& [name, t] : now->tensors) {
    absl::StatusOr<int64_t> width = DTypeSize(t.dtype);
    if (!width.ok() || *width < 1 || *width > 8) continue;
    const std::string family = Family(t.dtype, *width);
    const char* later = nullptr;
    if (next.ok()) {
      auto it = next->tensors.find(name);
      if (it != next->tensors.end() && it->second.dtype == t.dtype && it->second.shape == t.shape) {
        later = next->bytes.data() + it->second.begin;
      }
    }
    for (uint64_t at = t.begin; at < t.end; at += kChunkBytes) {
      const uint64_t n = std::min<uint64_t>(kChunkBytes, t.end - at);
      const std::vector<char> raw(now->bytes.data() + at, now->bytes.data() + at + n);
      for (const auto& [prefix, codec] : {std::pair{"grouped_zstd_ratio_", Codec::kGroupedZstd},
                                          std::pair{"zstd_ratio_", Codec::kZstd}}) {
        absl::StatusOr<Coded> coded = Code(codec, static_cast<int>(*width), raw);
        if (!coded.ok()) return 1;
        by[prefix + family].Add(*coded);
      }
      if (later != nullptr) {
        std::vector<char> delta(later + (at - t.begin), later + (at - t.begin) + n);
        codec::XorInto(raw, absl::MakeSpan(delta));
        absl::StatusOr<Coded> coded = Code(Codec::kGroupedZstd, static_cast<int>(*width), delta);
        if (!coded.ok()) return 1;
        by["delta_ratio_" + family].Add(*coded);
      }
    }
  }
  std::map<std::string, double> f;
  for (const auto& [key, coded] : by) {
    f[key] = coded.ratio();
    f[key + "_mib"] = coded.raw / double(1 << 20);
  }
  absl::PrintF("ckpt-bench --codecs --codec-files %s%s: 4 MiB chunks\n", c.codec_files[0],
               c.codec_files.size() > 1 ? " " + c.codec_files[1] : "");
  Report(c, "codec_files", f);
  return 0;
}

// Persisting through ckptd, raw and encoded: --ranks ranks fill their
// shards with trained-like fp32 values (synthetic_model.h), then save them
// blocking to storage under --dir with each codec, the codecs taking turns
// twice; each codec's figure is its faster round's save-to-persisted time
// (a round is the slowest rank's). Old steps are removed as new ones
// commit, so the disk holds two.
absl::Status MeasurePersist(const Config& c, std::map<std::string, double>& f) {
  Workspace ws(c);
  absl::FPrintF(stderr, "ckpt-bench: persisting %.2f GiB per codec to %s...\n", c.state_gib,
                ws.work);
  absl::StatusOr<std::unique_ptr<ChildProcess>> daemon =
      StartDaemon(c, ws.work, ws.socket, PoolBytes(c, ws.bytes), {"--retain_last=2"});
  if (!daemon.ok()) return daemon.status();
  absl::StatusOr<std::vector<std::unique_ptr<ChildProcess>>> workers =
      StartWorkers(c, ws.socket, c.ranks, ws.bytes, {});
  if (!workers.ok()) return workers.status();
  if (absl::StatusOr<std::vector<std::vector<double>>> filled = Broadcast(*workers, "trained 7");
      !filled.ok()) {
    return filled.status();
  }
  const std::pair<const char*, const char*> codecs[] = {{"persist_raw_s", "none"},
                                                        {"persist_compressed_s", "grouped-zstd"},
                                                        {"persist_zstd_s", "zstd"}};
  int64_t step = 1;
  for (int round = 0; round < 2; ++round) {
    for (const auto& [key, name] : codecs) {
      absl::StatusOr<std::vector<std::vector<double>>> saved =
          Broadcast(*workers, absl::StrCat("blocking ", step++, " durable ", name));
      if (!saved.ok()) return saved.status();
      const double seconds = MaxOver(*saved, 1);
      absl::FPrintF(stderr, "ckpt-bench: round %d %s: %.3f s\n", round, name, seconds);
      auto it = f.find(key);
      f[key] = it == f.end() ? seconds : std::min(it->second, seconds);
    }
  }
  for (auto& w : *workers) (void)w->Send("quit");
  std::error_code ec;
  std::filesystem::remove_all(ws.work, ec);
  f["persist_gib"] = static_cast<double>(ws.bytes) / (1ull << 30);
  // Over 1: compressing costs this disk more time than it saves in bytes,
  // which is why ckptd's default --codec is none (docs/compression.md).
  f["persist_compressed_over_raw"] = f["persist_compressed_s"] / f["persist_raw_s"];
  return absl::OkStatus();
}

}  // namespace

int RunCodecs(const Config& c) {
  if (!c.codec_files.empty()) return RunCodecFiles(c);

  const uint64_t bytes = static_cast<uint64_t>(c.state_gib * (1ull << 30));
  // A chunk of fp32 values holds kChunkBytes / 4 parameters; the bf16 one
  // half a chunk of the same parameters.
  const uint64_t params_per_chunk = kChunkBytes / 4;
  const uint64_t chunks = std::max<uint64_t>(1, bytes / (14 * params_per_chunk));
  SyntheticModel rng(42);
  std::map<std::string, Coded> by;
  absl::FPrintF(stderr, "ckpt-bench: %d chunk groups of %d parameters (%.2f GiB a step)...\n",
                chunks, params_per_chunk, chunks * 14.0 * params_per_chunk / (1ull << 30));
  for (uint64_t k = 0; k < chunks; ++k) {
    ChunkPair p = MakeChunks(rng, params_per_chunk, k / 4);  // 4 chunks per tensor
    struct Item {
      const char* key;
      Codec codec;
      int width;
      const std::vector<char>* raw;
    };
    std::vector<char> delta_bf16 = p.bf16[1], delta_master = p.master[1];
    std::vector<char> delta_m = p.m[1], delta_v = p.v[1];
    codec::XorInto(p.bf16[0], absl::MakeSpan(delta_bf16));
    codec::XorInto(p.master[0], absl::MakeSpan(delta_master));
    codec::XorInto(p.m[0], absl::MakeSpan(delta_m));
    codec::XorInto(p.v[0], absl::MakeSpan(delta_v));
    const Item items[] = {
        {"grouped_zstd_ratio_bf16", Codec::kGroupedZstd, 2, &p.bf16[1]},
        {"zstd_ratio_bf16", Codec::kZstd, 2, &p.bf16[1]},
        {"grouped_zstd_ratio_fp32", Codec::kGroupedZstd, 4, &p.master[1]},
        {"grouped_zstd_ratio_fp32", Codec::kGroupedZstd, 4, &p.m[1]},
        {"grouped_zstd_ratio_fp32", Codec::kGroupedZstd, 4, &p.v[1]},
        {"zstd_ratio_fp32", Codec::kZstd, 4, &p.master[1]},
        {"zstd_ratio_fp32", Codec::kZstd, 4, &p.m[1]},
        {"zstd_ratio_fp32", Codec::kZstd, 4, &p.v[1]},
        {"delta_ratio_bf16", Codec::kGroupedZstd, 2, &delta_bf16},
        {"delta_ratio_fp32", Codec::kGroupedZstd, 4, &delta_master},
        {"delta_ratio_fp32", Codec::kGroupedZstd, 4, &delta_m},
        {"delta_ratio_fp32", Codec::kGroupedZstd, 4, &delta_v},
        {"delta_ratio_fp32_weights", Codec::kGroupedZstd, 4, &delta_master},
        {"delta_ratio_fp32_adam", Codec::kGroupedZstd, 4, &delta_m},
        {"delta_ratio_fp32_adam", Codec::kGroupedZstd, 4, &delta_v},
    };
    for (const Item& item : items) {
      absl::StatusOr<Coded> coded = Code(item.codec, item.width, *item.raw);
      if (!coded.ok()) {
        absl::FPrintF(stderr, "ckpt-bench: %s\n", coded.status().ToString());
        return 1;
      }
      by[item.key].Add(*coded);
    }
  }
  std::map<std::string, double> f;
  for (const auto& [key, coded] : by) f[key] = coded.ratio();
  Coded grouped = by["grouped_zstd_ratio_bf16"];
  grouped.Add(by["grouped_zstd_ratio_fp32"]);
  f["compress_gbps_per_core"] = grouped.raw / grouped.encode_s / 1e9;
  f["decompress_gbps_per_core"] = grouped.raw / grouped.decode_s / 1e9;
  f["step_gib"] = chunks * 14.0 * params_per_chunk / (1ull << 30);
  if (!c.dir.empty()) {
    if (absl::Status s = MeasurePersist(c, f); !s.ok()) {
      absl::FPrintF(stderr, "ckpt-bench: %s\n", s.ToString());
      return 1;
    }
  }
  absl::PrintF(
      "ckpt-bench --codecs: synthetic mixed-precision Adam state, 4 MiB chunks, one core%s\n",
      c.dir.empty() ? "" : absl::StrCat("; persisted through ckptd to ", c.dir));
  Report(c, "codecs", f);
  return 0;
}

}  // namespace ckpt::bench
