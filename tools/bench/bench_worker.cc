#include "tools/bench/bench_worker.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ckpt/client.h"
#include "client/src/parallel_copy.h"
#include "proto/lib/status_context.h"
#include "tools/bench/synthetic_model.h"
#include "tools/bench/worker_loop.h"

namespace ckpt::bench {
namespace {

constexpr int kTensors = 4;
constexpr int64_t kColumns = 4096;
constexpr int64_t kElement = 4;

// Anonymous memory with every page written, so no timing includes faults.
char* Prefaulted(uint64_t bytes, char fill) {
  if (bytes == 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memset(p, fill, bytes);
  return static_cast<char*>(p);
}

}  // namespace

std::vector<HostTensor> BenchShards(uint64_t state_bytes, int rank, int world) {
  const int64_t rows = std::max<int64_t>(
      static_cast<int64_t>(state_bytes / (kTensors * kColumns * kElement)), world);
  std::vector<HostTensor> out;
  for (int t = 0; t < kTensors; ++t) {
    const int64_t begin = rows * rank / world;
    const int64_t end = rows * (rank + 1) / world;
    HostTensor shard;
    shard.fqn = absl::StrCat("model.layers.", t, ".weight");
    shard.dtype = DType::kFloat32;
    shard.global_shape = {rows, kColumns};
    shard.region = Region::Box({begin, 0}, {end - begin, kColumns});
    out.push_back(shard);
  }
  return out;
}

int RunWorker(const WorkerOptions& options) {
  ClientOptions client_options;
  client_options.socket_path = options.socket;
  client_options.job = options.job;
  client_options.rank = options.rank;
  client_options.world_size = options.world;
  client_options.local_rank = options.rank;
  client_options.copy_threads = options.copy_threads;
  auto client = Client::Attach(client_options);
  if (!client.ok()) {
    std::cout << Reply(client.status()) << std::endl;
    return 1;
  }
  std::vector<HostTensor> shards = BenchShards(options.state_bytes, options.rank, options.world);
  uint64_t bytes = 0;
  // The floors: out of the tensors, as a save copies (into scratch), and
  // into them, as a restore does. The same bytes copy at rates that differ
  // by up to a quarter here with the buffer written to (its pages' place
  // in the host's memory), so each floor writes where its checkpoint does.
  std::vector<client::CopyPiece> floor_copy, floor_in;
  for (HostTensor& t : shards) {
    const uint64_t n = static_cast<uint64_t>(t.region.lengths[0] * kColumns * kElement);
    t.data = Prefaulted(n, options.load ? 0 : static_cast<char>(options.rank + 1));
    char* scratch = Prefaulted(n, 0);
    if (n > 0 && (t.data == nullptr || scratch == nullptr)) {
      std::cout << "error cannot allocate " << n << " bytes" << std::endl;
      return 1;
    }
    floor_copy.push_back({scratch, static_cast<const char*>(t.data), n});
    floor_in.push_back({static_cast<char*>(t.data), scratch, n});
    bytes += n;
  }
  std::cout << "ready " << bytes << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "quit") break;
    if (command == "floor") {
      std::string way;
      in >> way;
      const auto start = Clock::now();
      client::ParallelCopy(way == "in" ? floor_in : floor_copy, options.copy_threads);
      std::cout << "ok " << Since(start) << std::endl;
    } else if (command == "trained") {
      // "trained SEED": values like trained fp32 weights and Adam's moments
      // (synthetic_model.h), one scale per tensor, so codecs meet what they
      // would in training (the constant fill compresses to nothing).
      uint64_t seed = 1;
      in >> seed;
      SyntheticModel model(seed * 131 + static_cast<uint64_t>(options.rank));
      for (size_t t = 0; t < shards.size(); ++t) {
        float* p = static_cast<float*>(shards[t].data);
        const uint64_t n = static_cast<uint64_t>(shards[t].region.lengths[0] * kColumns);
        const float scale = model.Scale(t + seed);
        for (uint64_t i = 0; i < n; ++i) p[i] = scale * model.Normal();
        // Never a zero in the first byte of a block: `load` checks for them.
        const uint32_t marker = 0x3f800001;  // 1.0000001f: its low byte is not zero
        for (uint64_t i = 0; i < n; i += 1024) std::memcpy(p + i, &marker, 4);
      }
      std::cout << "ok 0" << std::endl;
    } else if (command == "blocking") {
      // "blocking STEP [durable|memory|both [CODEC]]"
      int64_t step = 0;
      std::string tier = "durable";
      std::string codec;
      in >> step >> tier >> codec;
      SaveOptions save;
      save.blocking = true;
      save.tier = TierNamed(tier);
      save.codec = codec;
      const auto start = Clock::now();
      auto handle = (*client)->Save(step, shards, {}, save);
      const double stall = Since(start);
      absl::Status s = handle.ok() ? (*handle)->WaitPersisted() : handle.status();
      if (!s.ok()) {
        std::cout << Reply(s) << std::endl;
        continue;
      }
      std::cout << "ok " << stall << " " << Since(start) << std::endl;
    } else if (command == "lazy") {
      int64_t step0 = 0;
      int checkpoints = 0, every = 1, compute_ms = 0;
      in >> step0 >> checkpoints >> every >> compute_ms;
      absl::StatusOr<std::vector<double>> stalls =
          LazySaves([&](int64_t step) { return (*client)->Save(step, shards, {}); }, step0,
                    checkpoints, every, compute_ms);
      std::cout << (stalls.ok() ? absl::StrCat("ok ", absl::StrJoin(*stalls, " "))
                                : Reply(stalls.status()))
                << std::endl;
    } else if (command == "baseline") {
      // The plain way, as torch.save does it: one file per rank, buffered
      // writes, then fsync, all on the training thread.
      std::string dir;
      in >> dir;
      const std::string path = absl::StrCat(dir, "/baseline-rank-", options.rank, ".bin");
      const auto start = Clock::now();
      const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0640);
      // The first failure's errno, kept past close and unlink.
      int error = fd >= 0 ? 0 : errno;
      for (const HostTensor& t : shards) {
        const char* p = static_cast<const char*>(t.data);
        uint64_t left = static_cast<uint64_t>(t.region.lengths[0] * kColumns * kElement);
        while (error == 0 && left > 0) {
          const ssize_t n = write(fd, p, std::min<uint64_t>(left, 64 << 20));
          if (n <= 0) {
            error = n < 0 ? errno : EIO;
            break;
          }
          p += n;
          left -= static_cast<uint64_t>(n);
        }
      }
      if (error == 0 && fsync(fd) != 0) error = errno;
      if (fd >= 0) close(fd);
      const double seconds = Since(start);
      unlink(path.c_str());
      if (error != 0) {
        std::cout << "error baseline write to " << path << ": " << ErrnoMessage(error) << std::endl;
        continue;
      }
      std::cout << "ok " << seconds << std::endl;
    } else if (command == "load") {
      // "load [STEP]", latest without one. The shards are cleared first so
      // that the check below sees this load's bytes, not an earlier one's.
      // "load [STEP [any|memory|durable]]"
      int64_t wanted = kLatestStep;
      if (!(in >> wanted)) wanted = kLatestStep;
      std::string from = "any";
      in >> from;
      LoadOptions load;
      load.from = FromNamed(from);
      for (const HostTensor& t : shards) {
        std::memset(t.data, 0, static_cast<size_t>(t.region.lengths[0] * kColumns * kElement));
      }
      const auto start = Clock::now();
      absl::StatusOr<LoadResult> step = (*client)->Load(wanted, shards, {}, load);
      if (!step.ok()) {
        std::cout << Reply(step.status()) << std::endl;
        continue;
      }
      if (from != "any" && (step->tiers.size() != 1 || step->tiers[0] != from)) {
        std::cout << "error the load read from " << absl::StrJoin(step->tiers, "+") << ", not "
                  << from << std::endl;
        continue;
      }
      const double seconds = Since(start);
      // Saved data: rank r of the saving world wrote bytes r+1; a loaded
      // shard must hold only non-zero saved bytes.
      bool ok = true;
      for (const HostTensor& t : shards) {
        const char* p = static_cast<const char*>(t.data);
        const uint64_t n = static_cast<uint64_t>(t.region.lengths[0] * kColumns * kElement);
        for (uint64_t i = 0; i < n && ok; i += 4096) ok = p[i] != 0;
      }
      if (!ok) {
        std::cout << "error loaded bytes are wrong" << std::endl;
        continue;
      }
      std::cout << "ok " << seconds << std::endl;
    } else {
      std::cout << "error unknown command " << command << std::endl;
    }
  }
  return 0;
}

}  // namespace ckpt::bench
