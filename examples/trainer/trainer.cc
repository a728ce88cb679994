// An example trainer: one rank that saves a few host tensors and an object
// through the local ckptd, loads them back into fresh buffers and checks
// every byte. Exits 0 when everything round-trips, 1 otherwise.
//
//   trainer --socket=/run/ckptd/ckptd.sock [--job=example] [--step=100]
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/client.h"

namespace {

struct Tensor {
  std::string fqn;
  ckpt::DType dtype;
  std::vector<int64_t> shape;
  size_t element_bytes;
  std::vector<unsigned char> bytes;
};

// Bytes that differ per tensor and per position, so a swapped or shifted
// tensor shows as a mismatch.
std::vector<unsigned char> Pattern(const std::string& fqn, size_t n) {
  uint32_t x = 2166136261u;
  for (char c : fqn) x = (x ^ static_cast<unsigned char>(c)) * 16777619u;
  std::vector<unsigned char> out(n);
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    out[i] = static_cast<unsigned char>(x >> 16);
  }
  return out;
}

std::vector<ckpt::HostTensor> Describe(std::vector<Tensor>& tensors) {
  std::vector<ckpt::HostTensor> out;
  for (Tensor& t : tensors) {
    ckpt::HostTensor h;
    h.fqn = t.fqn;
    h.dtype = t.dtype;
    h.global_shape = t.shape;
    h.data = t.bytes.data();
    out.push_back(h);
  }
  return out;
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  }
  return fallback;
}

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "trainer: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ckpt::ClientOptions options;
  options.socket_path = Flag(argc, argv, "socket", options.socket_path);
  options.job = Flag(argc, argv, "job", "example");
  const int64_t step = std::stoll(Flag(argc, argv, "step", "100"));

  std::vector<Tensor> model = {
      {"model.embed.weight", ckpt::DType::kFloat32, {1000, 64}, 4, {}},
      {"model.layers.0.mlp.w1.bias", ckpt::DType::kBFloat16, {4097}, 2, {}},
      {"optimizer.step_count", ckpt::DType::kInt64, {}, 8, {}},
  };
  for (Tensor& t : model) {
    int64_t elements = 1;
    for (int64_t d : t.shape) elements *= d;
    t.bytes = Pattern(t.fqn, static_cast<size_t>(elements) * t.element_bytes);
  }
  const std::string loader_state = "epoch=3;batch=1234";

  absl::StatusOr<std::unique_ptr<ckpt::Client>> client = ckpt::Client::Attach(options);
  if (!client.ok()) return Fail("attach", client.status());

  absl::StatusOr<std::shared_ptr<ckpt::SaveHandle>> handle =
      (*client)->Save(step, Describe(model), {{"data_loader", false, loader_state}});
  if (!handle.ok()) return Fail("save", handle.status());
  if (absl::Status s = (*handle)->WaitSnapshot(); !s.ok()) return Fail("snapshot", s);
  if (absl::Status s = (*handle)->WaitPersisted(); !s.ok()) return Fail("persist", s);

  // Fresh buffers, poisoned: every byte must come from the checkpoint.
  std::vector<Tensor> loaded = model;
  for (Tensor& t : loaded) std::memset(t.bytes.data(), 0x5a, t.bytes.size());
  std::string loaded_state;
  absl::StatusOr<int64_t> got =
      (*client)->Load(ckpt::kLatestStep, Describe(loaded), {{"data_loader", &loaded_state}});
  if (!got.ok()) return Fail("load", got.status());
  if (*got != step) {
    std::fprintf(stderr, "trainer: loaded step %lld, saved %lld\n", static_cast<long long>(*got),
                 static_cast<long long>(step));
    return 1;
  }

  int bad = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    if (loaded[i].bytes != model[i].bytes) {
      std::fprintf(stderr, "trainer: %s differs after load\n", model[i].fqn.c_str());
      ++bad;
    }
  }
  if (loaded_state != loader_state) {
    std::fprintf(stderr, "trainer: object data_loader differs after load\n");
    ++bad;
  }
  if (bad != 0) return 1;
  std::printf("trainer: saved and loaded step %lld: %zu tensors and 1 object match\n",
              static_cast<long long>(step), model.size());
  return 0;
}
