// ckpt._ckpt: the C++ client for Python (the ckpt package wraps it).
//
// Tensors cross as plain descriptions (name, dtype, global shape, region,
// address of the bytes): the Python side keeps the tensors alive and
// unchanged until the snapshot is taken, and the bytes are never copied or
// pickled here. Every call that may wait releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ckpt/client.h"

namespace py = pybind11;

namespace ckpt::agent {
namespace {

// A failed status, raised in Python as ckpt.CheckpointError with the
// daemon's message and the status code's name.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const absl::Status& s)
      : std::runtime_error(s.ToString()), code_(absl::StatusCodeToString(s.code())) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

void Check(const absl::Status& s) {
  if (!s.ok()) throw StatusError(s);
}

// (fqn, dtype, global_shape, kind, offsets, lengths, flat_begin, flat_end,
//  address, nbytes, on_cuda); kind: "whole", "box" or "flat".
using TensorSpec =
    std::tuple<std::string, int, std::vector<int64_t>, std::string, std::vector<int64_t>,
               std::vector<int64_t>, int64_t, int64_t, uintptr_t, uint64_t, bool>;

// Zero-size tensors may have no storage; the client wants an address all
// the same, and never touches it for zero bytes.
char kEmpty[1];

HostTensor ToHostTensor(const TensorSpec& spec) {
  const auto& [fqn, dtype, shape, kind, offsets, lengths, flat_begin, flat_end, address, nbytes,
               on_cuda] = spec;
  HostTensor t;
  t.fqn = fqn;
  if (dtype < 1 || dtype > static_cast<int>(DType::kFloat8E5M2)) {
    throw std::invalid_argument("tensor " + fqn + ": unknown dtype code " + std::to_string(dtype));
  }
  t.dtype = static_cast<DType>(dtype);
  t.global_shape = shape;
  if (kind == "whole") {
    t.region = Region::Whole();
  } else if (kind == "box") {
    t.region = Region::Box(offsets, lengths);
  } else if (kind == "flat") {
    t.region = Region::Flat(flat_begin, flat_end);
  } else {
    throw std::invalid_argument("tensor " + fqn + ": unknown region kind " + kind);
  }
  t.data = address != 0 ? reinterpret_cast<void*>(address) : (nbytes == 0 ? kEmpty : nullptr);
  t.location = on_cuda ? Location::kCudaDevice : Location::kHost;
  return t;
}

std::vector<HostTensor> ToHostTensors(const std::vector<TensorSpec>& specs) {
  std::vector<HostTensor> out;
  out.reserve(specs.size());
  for (const TensorSpec& spec : specs) out.push_back(ToHostTensor(spec));
  return out;
}

class PySaveHandle {
 public:
  explicit PySaveHandle(std::shared_ptr<SaveHandle> handle) : handle_(std::move(handle)) {}
  int64_t step() const { return handle_->step(); }
  void WaitSnapshot() {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = handle_->WaitSnapshot();
    }
    Check(s);
  }
  void WaitPersisted() {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = handle_->WaitPersisted();
    }
    Check(s);
  }

 private:
  std::shared_ptr<SaveHandle> handle_;
};

class PyClient {
 public:
  PyClient(const std::string& socket_path, const std::string& job, int rank, int world_size,
           int local_rank, int copy_threads, bool gpu_push, int local_world_size) {
    ClientOptions o;
    o.socket_path = socket_path;
    o.job = job;
    o.rank = rank;
    o.world_size = world_size;
    o.local_rank = local_rank;
    o.local_world_size = local_world_size;
    o.copy_threads = copy_threads;
    o.gpu_transfer =
        gpu_push ? ClientOptions::GpuTransfer::kPush : ClientOptions::GpuTransfer::kPull;
    absl::StatusOr<std::unique_ptr<Client>> client;
    {
      py::gil_scoped_release release;
      client = Client::Attach(o);
    }
    Check(client.status());
    client_ = std::move(*client);
  }

  // objects: (key, bytes, global).
  PySaveHandle Save(int64_t step, const std::vector<TensorSpec>& tensors,
                    const std::vector<std::tuple<std::string, py::bytes, bool>>& objects,
                    bool blocking, bool partial, uintptr_t cuda_stream,
                    const std::map<std::string, std::string>& metadata, const std::string& tier,
                    const std::string& codec, int delta_every) {
    std::vector<HostTensor> host = ToHostTensors(tensors);
    std::vector<SaveObject> saved;
    saved.reserve(objects.size());
    for (const auto& [key, bytes, global] : objects) {
      saved.push_back({key, global, std::string(bytes)});
    }
    SaveOptions options;
    if (tier == "memory") {
      options.tier = Tier::kMemory;
    } else if (tier == "both") {
      options.tier = Tier::kMemoryAndDurable;
    } else if (tier != "durable") {
      throw py::value_error("tier is 'durable', 'memory' or 'both', not '" + tier + "'");
    }
    options.blocking = blocking;
    options.partial = partial;
    options.cuda_stream = reinterpret_cast<void*>(cuda_stream);
    options.user_metadata = metadata;
    options.codec = codec;
    options.delta_every = delta_every;
    absl::StatusOr<std::shared_ptr<SaveHandle>> handle;
    {
      py::gil_scoped_release release;
      handle = client_->Save(step, std::move(host), std::move(saved), options);
    }
    Check(handle.status());
    return PySaveHandle(std::move(*handle));
  }

  // Fills the tensors; returns (step loaded, {key: bytes}, [tiers read],
  // chunks read from storage after failing verification in memory, bytes
  // delivered, [(kind, host, bytes)]: where they came from, summing to them).
  py::tuple Load(int64_t step, const std::vector<TensorSpec>& tensors,
                 const std::vector<std::string>& keys, const std::string& source) {
    LoadOptions options;
    if (source == "memory") {
      options.from = LoadOptions::From::kMemory;
    } else if (source == "durable") {
      options.from = LoadOptions::From::kDurable;
    } else if (source != "any") {
      throw py::value_error("source is 'any', 'memory' or 'durable', not '" + source + "'");
    }
    std::vector<HostTensor> host = ToHostTensors(tensors);
    std::vector<std::string> values(keys.size());
    std::vector<LoadObject> objects;
    objects.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) objects.push_back({keys[i], &values[i]});
    absl::StatusOr<LoadResult> loaded;
    {
      py::gil_scoped_release release;
      loaded = client_->Load(step, host, objects, options);
    }
    Check(loaded.status());
    py::dict out;
    for (size_t i = 0; i < keys.size(); ++i) out[py::str(keys[i])] = py::bytes(values[i]);
    py::list tiers;
    for (const std::string& t : loaded->tiers) tiers.append(py::str(t));
    py::list sources;
    for (const LoadSource& s : loaded->sources) {
      sources.append(py::make_tuple(py::str(s.kind), py::str(s.host), s.bytes));
    }
    return py::make_tuple(loaded->step, out, tiers, loaded->fallback_chunks, loaded->bytes,
                          sources);
  }

  // (step, [(fqn, dtype code, global shape, partial)], [(key, rank)]):
  // what a checkpoint holds, from its manifest; -1 is a global object.
  py::tuple Describe(int64_t step) {
    absl::StatusOr<CheckpointContents> contents;
    {
      py::gil_scoped_release release;
      contents = client_->Describe(step);
    }
    Check(contents.status());
    py::list tensors;
    for (const CheckpointContents::Tensor& t : contents->tensors) {
      tensors.append(py::make_tuple(t.fqn, static_cast<int>(t.dtype), t.global_shape, t.partial));
    }
    py::list objects;
    for (const CheckpointContents::Object& o : contents->objects) {
      objects.append(py::make_tuple(o.key, o.rank));
    }
    return py::make_tuple(contents->step, tensors, objects);
  }

 private:
  std::unique_ptr<Client> client_;
};

}  // namespace
}  // namespace ckpt::agent

PYBIND11_MODULE(_ckpt, m) {
  using namespace ckpt::agent;
  m.doc() = "The ckpt client (use the ckpt package, not this module)";
  m.attr("LATEST") = ckpt::kLatestStep;
  static py::exception<StatusError> error(m, "CheckpointError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* type = error.ptr();
      py::object exc =
          py::reinterpret_steal<py::object>(PyObject_CallFunction(type, "s", e.what()));
      if (exc) {
        exc.attr("code") = e.code();
        PyErr_SetObject(type, exc.ptr());
      }
    }
  });
  py::class_<PySaveHandle>(m, "SaveHandle")
      .def_property_readonly("step", &PySaveHandle::step)
      .def("wait_snapshot", &PySaveHandle::WaitSnapshot)
      .def("wait_persisted", &PySaveHandle::WaitPersisted);
  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, const std::string&, int, int, int, int, bool, int>(),
           py::arg("socket_path"), py::arg("job"), py::arg("rank"), py::arg("world_size"),
           py::arg("local_rank"), py::arg("copy_threads"), py::arg("gpu_push"),
           py::arg("local_world_size") = 0)
      .def("save", &PyClient::Save, py::arg("step"), py::arg("tensors"), py::arg("objects"),
           py::arg("blocking"), py::arg("partial"), py::arg("cuda_stream"), py::arg("metadata"),
           py::arg("tier") = "durable", py::arg("codec") = "", py::arg("delta_every") = 0)
      .def("load", &PyClient::Load, py::arg("step"), py::arg("tensors"), py::arg("keys"),
           py::arg("source") = "any")
      .def("describe", &PyClient::Describe, py::arg("step"));
}
