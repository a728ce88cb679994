#include "tools/bench/gpu_worker.h"

#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ckpt/client.h"
#include "gpu/device_factory.h"
#include "tools/bench/worker_loop.h"

#if CKPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ckpt::bench {

#if CKPT_HAVE_CUDA
namespace {

absl::Status Cuda(cudaError_t err, const std::string& call) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorString(err)));
}

// A tensor of the shard: its device memory (a cudaMalloc of its own, as the
// caching allocator hands out large blocks), a pinned host buffer as large
// (the floors' other end, and where a load is checked), and its byte.
struct DeviceShard {
  void* device = nullptr;
  void* pinned = nullptr;
  uint64_t bytes = 0;
  unsigned char fill = 0;
};

class GpuRank {
 public:
  explicit GpuRank(const WorkerOptions& options) : options_(options) {}

  ~GpuRank() {
    for (cudaStream_t s : streams_) (void)cudaStreamDestroy(s);
    for (DeviceShard& d : device_) {
      (void)cudaFree(d.device);
      (void)cudaFreeHost(d.pinned);
    }
  }

  absl::Status Init() {
    if (absl::Status s = Cuda(cudaSetDevice(0), "cudaSetDevice(0)"); !s.ok()) return s;
    tensors_ = BenchShards(options_.state_bytes, options_.rank, options_.world);
    for (size_t t = 0; t < tensors_.size(); ++t) {
      HostTensor& tensor = tensors_[t];
      DeviceShard d;
      d.bytes = static_cast<uint64_t>(tensor.region.lengths[0] * tensor.region.lengths[1] * 4);
      d.fill = static_cast<unsigned char>(1 + options_.rank * 4 + t);
      cudaStream_t stream = nullptr;
      absl::Status s = Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags");
      if (s.ok()) streams_.push_back(stream);
      if (s.ok() && d.bytes > 0) s = Cuda(cudaMalloc(&d.device, d.bytes), "cudaMalloc");
      if (s.ok() && d.bytes > 0) s = Cuda(cudaMallocHost(&d.pinned, d.bytes), "cudaMallocHost");
      if (s.ok() && d.bytes > 0) s = Cuda(cudaMemset(d.device, d.fill, d.bytes), "cudaMemset");
      device_.push_back(d);
      if (!s.ok()) return s;
      tensor.location = Location::kCudaDevice;
      tensor.data = d.device;
      bytes_ += d.bytes;
    }
    if (absl::Status s = Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); !s.ok()) return s;
    ClientOptions client_options;
    client_options.socket_path = options_.socket;
    client_options.job = "bench-gpu";
    client_options.rank = options_.rank;
    client_options.world_size = options_.world;
    client_options.local_rank = options_.rank;
    client_options.gpu_transfer =
        options_.gpu_push ? ClientOptions::GpuTransfer::kPush : ClientOptions::GpuTransfer::kPull;
    auto client = Client::Attach(client_options);
    if (!client.ok()) return client.status();
    client_ = std::move(*client);
    return absl::OkStatus();
  }

  uint64_t bytes() const { return bytes_; }

  std::string Name() const {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "unknown";
    return prop.name;
  }

  // Every tensor at once, a stream each, as the link allows.
  absl::StatusOr<double> Floor(bool to_host) {
    const auto start = Clock::now();
    for (size_t t = 0; t < device_.size(); ++t) {
      const DeviceShard& d = device_[t];
      if (d.bytes == 0) continue;
      cudaError_t err =
          to_host
              ? cudaMemcpyAsync(d.pinned, d.device, d.bytes, cudaMemcpyDeviceToHost, streams_[t])
              : cudaMemcpyAsync(d.device, d.pinned, d.bytes, cudaMemcpyHostToDevice, streams_[t]);
      if (absl::Status s = Cuda(err, "cudaMemcpyAsync"); !s.ok()) return s;
    }
    for (cudaStream_t s : streams_) {
      if (absl::Status st = Cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize"); !st.ok()) {
        return st;
      }
    }
    return Since(start);
  }

  // Save and its stall; the trainer's stream (tensor 0's) is the one named.
  absl::StatusOr<std::shared_ptr<SaveHandle>> Save(int64_t step, Tier tier, bool blocking) {
    SaveOptions save;
    save.tier = tier;
    save.blocking = blocking;
    save.cuda_stream = streams_.empty() ? nullptr : streams_[0];
    return client_->Save(step, tensors_, {}, save);
  }

  absl::StatusOr<double> Load(int64_t step, LoadOptions::From from) {
    for (const DeviceShard& d : device_) {
      if (d.bytes == 0) continue;
      if (absl::Status s = Cuda(cudaMemset(d.device, 0, d.bytes), "cudaMemset"); !s.ok()) return s;
    }
    if (absl::Status s = Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); !s.ok()) return s;
    LoadOptions load;
    load.from = from;
    const auto start = Clock::now();
    absl::StatusOr<LoadResult> result = client_->Load(step, tensors_, {}, load);
    if (!result.ok()) return result.status();
    const double seconds = Since(start);
    if (absl::Status s = Check(); !s.ok()) return s;
    return seconds;
  }

  // The IPC exports of the tensors, as the client sends them.
  absl::StatusOr<std::string> Export() {
    std::unique_ptr<gpu::DeviceRuntime> runtime = gpu::DetectDeviceRuntime();
    std::vector<std::string> out;
    for (const DeviceShard& d : device_) {
      if (d.bytes == 0) continue;
      absl::StatusOr<gpu::IpcExport> e = runtime->ExportIpcHandle(d.device);
      if (!e.ok()) return e.status();
      out.push_back(absl::StrCat(absl::BytesToHexString(e->handle), ":", e->offset, ":",
                                 e->allocation_bytes, ":", e->device, ":", d.bytes));
    }
    return absl::StrJoin(out, " ");
  }

 private:
  // Every byte of every tensor is its fill again (through the pinned buffers).
  absl::Status Check() {
    absl::StatusOr<double> copied = Floor(/*to_host=*/true);
    if (!copied.ok()) return copied.status();
    for (size_t t = 0; t < device_.size(); ++t) {
      const DeviceShard& d = device_[t];
      const unsigned char* p = static_cast<const unsigned char*>(d.pinned);
      for (uint64_t i = 0; i < d.bytes; ++i) {
        if (p[i] != d.fill) {
          return absl::DataLossError(absl::StrCat("tensor ", tensors_[t].fqn, " byte ", i,
                                                  " loaded as ", int{p[i]}, ", saved as ",
                                                  int{d.fill}));
        }
      }
    }
    return absl::OkStatus();
  }

  const WorkerOptions options_;
  std::vector<HostTensor> tensors_;
  std::vector<DeviceShard> device_;
  std::vector<cudaStream_t> streams_;
  std::unique_ptr<Client> client_;
  uint64_t bytes_ = 0;
};

std::string Answer(const absl::StatusOr<double>& seconds) {
  return seconds.ok() ? absl::StrCat("ok ", *seconds) : Reply(seconds.status());
}

}  // namespace

int RunGpuWorker(const WorkerOptions& options) {
  GpuRank rank(options);
  if (absl::Status s = rank.Init(); !s.ok()) {
    std::cout << Reply(s) << std::endl;
    return 1;
  }
  std::cout << "ready " << rank.bytes() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "quit") break;
    if (command == "name") {
      std::cout << "name " << rank.Name() << std::endl;
    } else if (command == "floor") {
      std::string way;
      in >> way;
      std::cout << Answer(rank.Floor(way == "d2h")) << std::endl;
    } else if (command == "blocking") {
      int64_t step = 0;
      std::string tier;
      in >> step >> tier;
      const auto start = Clock::now();
      auto handle = rank.Save(step, TierNamed(tier), /*blocking=*/true);
      const double stall = Since(start);
      absl::Status s = handle.ok() ? (*handle)->WaitPersisted() : handle.status();
      std::cout << (s.ok() ? absl::StrCat("ok ", stall, " ", Since(start)) : Reply(s)) << std::endl;
    } else if (command == "lazy") {
      int64_t step0 = 0;
      int checkpoints = 0, every = 1, compute_ms = 0;
      std::string tier;
      in >> step0 >> checkpoints >> every >> compute_ms >> tier;
      absl::StatusOr<std::vector<double>> stalls = LazySaves(
          [&](int64_t step) { return rank.Save(step, TierNamed(tier), /*blocking=*/false); }, step0,
          checkpoints, every, compute_ms);
      std::cout << (stalls.ok() ? absl::StrCat("ok ", absl::StrJoin(*stalls, " "))
                                : Reply(stalls.status()))
                << std::endl;
    } else if (command == "load") {
      int64_t step = kLatestStep;
      std::string from = "any";
      in >> step >> from;
      std::cout << Answer(rank.Load(step, FromNamed(from))) << std::endl;
    } else if (command == "export") {
      absl::StatusOr<std::string> exports = rank.Export();
      std::cout << (exports.ok() ? "ok " + *exports : Reply(exports.status())) << std::endl;
    } else {
      std::cout << "error unknown command " << command << std::endl;
    }
  }
  return 0;
}

#else  // !CKPT_HAVE_CUDA

int RunGpuWorker(const WorkerOptions&) {
  std::cout << "error ckpt-bench was built without CUDA" << std::endl;
  return 1;
}

#endif

}  // namespace ckpt::bench
