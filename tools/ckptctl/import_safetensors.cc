#include "tools/ckptctl/import_safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ckpt/client.h"
#include "proto/lib/status_context.h"
#include "tools/ckptctl/safetensors.h"

namespace ckpt::ctl {
namespace {

struct Mapping {
  void* base = MAP_FAILED;
  size_t length = 0;
  ~Mapping() {
    if (base != MAP_FAILED && length > 0) ::munmap(base, length);
  }
};

}  // namespace

absl::Status ImportSafetensors(const ImportOptions& o, std::ostream& log) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(o.in_dir, ec)) {
    if (absl::EndsWith(entry.path().filename().string(), ".safetensors")) {
      paths.push_back(entry.path().string());
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat("list ", o.in_dir, ": ", ec.message()));
  if (paths.empty())
    return absl::NotFoundError(absl::StrCat("no *.safetensors file in ", o.in_dir));
  std::sort(paths.begin(), paths.end());

  std::vector<std::unique_ptr<Mapping>> mappings;
  std::vector<HostTensor> tensors;
  std::map<std::string, std::string> seen;  // name -> file
  uint64_t total = 0;
  for (const std::string& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    auto mapping = std::make_unique<Mapping>();
    mapping->length = size;
    if (size > 0) mapping->base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (size > 0 && mapping->base == MAP_FAILED)
      return ErrnoStatus(errno, absl::StrCat("mmap ", path));
    const char* base = static_cast<const char*>(mapping->base);
    uint64_t n = 0;
    if (size >= 8) {
      for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(base[i]);
    }
    const std::string head =
        size >= 8
            ? std::string(base, std::min<uint64_t>(size, 8 + std::min(n, kMaxSafetensorsHeader)))
            : std::string();
    absl::StatusOr<std::vector<SafetensorsTensor>> parsed =
        ParseSafetensorsHeader(head, size, path);
    if (!parsed.ok()) return parsed.status();
    for (const SafetensorsTensor& t : *parsed) {
      auto [it, added] = seen.emplace(t.name, path);
      if (!added) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", t.name, " is in both ", it->second, " and ", path));
      }
      HostTensor h;
      h.fqn = t.name;
      h.dtype = static_cast<DType>(t.dtype);
      h.global_shape = t.shape;
      h.region = Region::Whole();
      h.data = const_cast<char*>(base + t.begin);  // read only: Save only reads it
      tensors.push_back(std::move(h));
      total += t.end - t.begin;
    }
    mappings.push_back(std::move(mapping));
  }

  ClientOptions client_options;
  client_options.socket_path = o.socket_path;
  client_options.job = o.job;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Attach(client_options);
  if (!client.ok()) return client.status();
  SaveOptions save;
  save.user_metadata["imported_from"] = o.in_dir;
  absl::StatusOr<std::shared_ptr<SaveHandle>> handle = (*client)->Save(o.step, tensors, {}, save);
  if (!handle.ok()) return handle.status();
  if (absl::Status s = (*handle)->WaitPersisted(); !s.ok()) return s;
  log << "imported " << tensors.size() << " tensors, " << total << " bytes from " << paths.size()
      << " files as job " << o.job << " step " << o.step << "\n";
  return absl::OkStatus();
}

}  // namespace ckpt::ctl
