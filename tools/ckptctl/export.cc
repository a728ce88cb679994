#include "tools/ckptctl/export.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/retention.h"
#include "daemon/planning/load_planner.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/chunk_reader.h"
#include "daemon/storage/layout.h"
#include "daemon/storage/s3/s3_backend.h"
#include "daemon/storage/step_location.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "proto/lib/copy_run.h"
#include "proto/lib/dtype.h"
#include "proto/lib/status_context.h"
#include "tools/ckptctl/safetensors.h"

namespace ckpt::ctl {
namespace {

constexpr uint64_t kAlignment = 4096;

struct Selected {
  const v1::TensorEntry* entry = nullptr;
  std::string name;  // after renaming
  uint64_t bytes = 0;
  uint64_t element_size = 0;
};

struct Rule {
  std::string pattern;
  std::regex regex;
  std::string replacement;
};

absl::StatusOr<std::vector<Rule>> ReadRenameRules(const std::string& path) {
  std::vector<Rule> rules;
  if (path.empty()) return rules;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("rename map ", path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::Struct map;
  if (auto s = google::protobuf::util::JsonStringToMessage(text.str(), &map); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rename map ", path, ": not a JSON object of strings: ", s.ToString()));
  }
  std::map<std::string, std::string> sorted;
  for (const auto& [pattern, value] : map.fields()) {
    if (value.kind_case() != google::protobuf::Value::kStringValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("rename map ", path, ": the value of ", pattern, " is not a string"));
    }
    sorted[pattern] = value.string_value();
  }
  for (const auto& [pattern, replacement] : sorted) {
    try {
      rules.push_back({pattern, std::regex(pattern), replacement});
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("rename map ", path, ": bad regex ", pattern, ": ", e.what()));
    }
  }
  return rules;
}

absl::Status WriteAll(int fd, const char* data, uint64_t length, uint64_t offset,
                      const std::string& path) {
  while (length > 0) {
    const ssize_t n = ::pwrite(fd, data, length, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("write ", path));
    }
    data += n;
    length -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// Writes bytes tmp then renames it over path, synced both ways.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
  absl::Status s = WriteAll(fd, bytes.data(), bytes.size(), 0, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus(errno, absl::StrCat("fsync ", tmp));
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoStatus(errno, absl::StrCat("rename ", tmp));
  }
  return s;
}

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, AlignedFree>;

Buffer Allocate(uint64_t bytes) {
  const uint64_t rounded =
      std::max<uint64_t>((bytes + kAlignment - 1) / kAlignment, 1) * kAlignment;
  return Buffer(static_cast<char*>(std::aligned_alloc(kAlignment, rounded)));
}

// Writes elements [begin, end) of the tensor, assembled from its stored
// shards, at `offset` of fd.
absl::Status WritePiece(const v1::CheckpointManifest& manifest, storage::ChunkReader& reader,
                        const Selected& t, int64_t begin, int64_t end, int fd, uint64_t offset,
                        const std::string& path, char* piece, Buffer& chunk_buffer,
                        uint64_t& chunk_capacity) {
  v1::NodeLoadPlan plan;
  v1::NodeLoadPlan::RankRequests* rank = plan.add_ranks();
  rank->set_rank(0);
  v1::TensorShard* want = rank->add_tensors();
  want->set_fqn(t.entry->fqn());
  want->set_dtype(t.entry->dtype());
  *want->mutable_global_shape() = t.entry->global_shape();
  want->mutable_region()->mutable_flat()->set_begin(begin);
  want->mutable_region()->mutable_flat()->set_end(end);
  absl::StatusOr<v1::LoadAssignment> assignment = planning::PlanLoad(manifest, {plan});
  if (!assignment.ok())
    return WithContext(assignment.status(), absl::StrCat("tensor ", t.entry->fqn()));
  const uint64_t length = static_cast<uint64_t>(end - begin) * t.element_size;
  uint64_t covered = 0;
  for (const v1::ChunkRead& read : assignment->reads()) {
    const uint64_t chunk_length = read.chunk().length();
    if (chunk_length + kAlignment > chunk_capacity) {
      chunk_capacity = chunk_length + kAlignment;
      chunk_buffer = Allocate(chunk_capacity);
      if (!chunk_buffer) return absl::ResourceExhaustedError("no memory for a chunk");
    }
    if (absl::Status s = reader.Read(read.chunk(), read.fqn(), chunk_buffer.get()); !s.ok()) {
      return s;
    }
    for (const v1::CopyRun& run : read.runs()) {
      if (absl::Status s = CheckCopyRun(run, chunk_length, length); !s.ok()) {
        return WithContext(s, absl::StrCat("tensor ", t.entry->fqn()));
      }
      CopyStrided(run, chunk_buffer.get(), piece);
      covered += run.length() * CopyRunRepetitions(run);
    }
  }
  if (covered != length) {
    return absl::DataLossError(absl::StrCat("tensor ", t.entry->fqn(), ": the checkpoint holds ",
                                            covered, " of the ", length, " bytes of elements [",
                                            begin, ", ", end, ")"));
  }
  return WriteAll(fd, piece, length, offset, path);
}

}  // namespace

absl::StatusOr<uint64_t> ParseSize(const std::string& text) {
  std::string t = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  const std::pair<const char*, uint64_t> units[] = {{"GIB", 1ull << 30},
                                                    {"MIB", 1ull << 20},
                                                    {"KIB", 1ull << 10},
                                                    {"GB", 1000000000ull},
                                                    {"MB", 1000000ull},
                                                    {"KB", 1000ull},
                                                    {"B", 1}};
  uint64_t unit = 1;
  for (const auto& [suffix, value] : units) {
    if (absl::EndsWith(t, suffix)) {
      t.resize(t.size() - std::string(suffix).size());
      unit = value;
      break;
    }
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(t), &n) || n == 0 || n > UINT64_MAX / unit) {
    return absl::InvalidArgumentError(
        absl::StrCat("size '", text, "': want a positive number with GB, MB, KB, GiB, MiB or KiB"));
  }
  return n * unit;
}

absl::Status ExportSafetensors(const ExportOptions& o, std::ostream& log) {
  std::unique_ptr<storage::Backend> backend;
  if (storage::s3::IsS3Url(o.storage_root)) {
    absl::StatusOr<std::unique_ptr<storage::Backend>> s3 =
        storage::s3::OpenS3Root(o.storage_root, o.s3);
    if (!s3.ok()) return s3.status();
    backend = std::move(*s3);
  } else {
    backend = storage::NewPosixBackend();
  }
  coordinator::Catalog catalog(*backend, o.storage_root);
  absl::StatusOr<int64_t> step = catalog.ResolveStep(o.job, o.step);
  if (!step.ok()) return step.status();
  // ckptd's gc keeps a pinned step (coordinator/retention.h) until this
  // returns. Pinned before the manifest is read: a step deleted meanwhile
  // reads as not found, never as half a checkpoint.
  absl::StatusOr<std::unique_ptr<storage::FileLock>> pin =
      coordinator::PinStep(*backend, o.storage_root, o.job, *step);
  if (!pin.ok() && !absl::IsNotFound(pin.status())) {
    // Without working locks gc cannot lock the step either, and keeps it.
    log << "warning: reading step " << *step << " unpinned: " << pin.status().message() << "\n";
  }
  absl::StatusOr<v1::CheckpointManifest> manifest = catalog.ReadManifest(o.job, *step);
  if (!manifest.ok()) return manifest.status();

  std::optional<std::regex> filter;
  if (!o.tensors_regex.empty()) {
    try {
      filter.emplace(o.tensors_regex);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tensors ", o.tensors_regex, ": ", e.what()));
    }
  }
  absl::StatusOr<std::vector<Rule>> rules = ReadRenameRules(o.rename_file);
  if (!rules.ok()) return rules.status();

  std::vector<Selected> tensors;
  std::map<std::string, std::string> named;  // new name -> fqn
  for (const v1::TensorEntry& entry : manifest->tensors()) {
    if (filter && !std::regex_search(entry.fqn(), *filter)) continue;
    if (entry.partial()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor ", entry.fqn(), " was saved partially: it cannot be exported whole"));
    }
    Selected t;
    t.entry = &entry;
    t.name = entry.fqn();
    for (const Rule& rule : *rules) {
      if (std::regex_search(t.name, rule.regex)) {
        t.name = std::regex_replace(t.name, rule.regex, rule.replacement);
      }
    }
    if (t.name.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", entry.fqn(), " is renamed to nothing"));
    auto [it, added] = named.emplace(t.name, entry.fqn());
    if (!added) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors ", it->second, " and ", entry.fqn(), " are both named ", t.name));
    }
    absl::StatusOr<int64_t> element = DTypeSize(entry.dtype());
    if (!element.ok()) return WithContext(element.status(), absl::StrCat("tensor ", entry.fqn()));
    t.element_size = static_cast<uint64_t>(*element);
    uint64_t elements = 1;
    for (int64_t d : entry.global_shape()) elements *= static_cast<uint64_t>(d);
    t.bytes = elements * t.element_size;  // the manifest was validated: fits
    tensors.push_back(t);
  }
  if (tensors.empty()) return absl::NotFoundError("no tensor to export (check --tensors)");
  std::sort(tensors.begin(), tensors.end(),
            [](const Selected& a, const Selected& b) { return a.name < b.name; });

  // Files: in name order, a new one when the next tensor would not fit.
  std::vector<std::vector<const Selected*>> files(1);
  uint64_t in_file = 0, total = 0;
  for (const Selected& t : tensors) {
    if (!files.back().empty() && in_file + t.bytes > o.max_shard_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(&t);
    in_file += t.bytes;
    total += t.bytes;
  }

  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("create ", o.out_dir, ": ", ec.message()));
  absl::StatusOr<std::string> dir = storage::ResolveStepDir(*backend, o.storage_root, o.job, *step);
  if (!dir.ok()) return dir.status();
  storage::ChunkReader reader(*backend, *dir, kAlignment);
  Buffer piece = Allocate(o.piece_bytes);
  Buffer chunk_buffer;
  uint64_t chunk_capacity = 0;
  std::map<std::string, std::string> weight_map;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", f + 1, files.size());
    const std::string path = absl::StrCat(o.out_dir, "/", name);
    std::vector<SafetensorsEntry> entries;
    uint64_t offset = 0;
    for (const Selected* t : files[f]) {
      absl::StatusOr<std::string> dtype = SafetensorsDType(t->entry->dtype());
      if (!dtype.ok()) return WithContext(dtype.status(), absl::StrCat("tensor ", t->entry->fqn()));
      entries.push_back({t->name,
                         *dtype,
                         {t->entry->global_shape().begin(), t->entry->global_shape().end()},
                         offset,
                         offset + t->bytes});
      offset += t->bytes;
      weight_map[t->name] = name;
    }
    const std::string header = SafetensorsHeader(entries);
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
    absl::Status s = WriteAll(fd, header.data(), header.size(), 0, tmp);
    uint64_t at = header.size();
    for (const Selected* t : files[f]) {
      const int64_t elements =
          static_cast<int64_t>(t->bytes / std::max<uint64_t>(t->element_size, 1));
      const int64_t per_piece =
          static_cast<int64_t>(std::max<uint64_t>(o.piece_bytes / t->element_size, 1));
      for (int64_t begin = 0; s.ok() && begin < elements; begin += per_piece) {
        const int64_t end = std::min(elements, begin + per_piece);
        s = WritePiece(*manifest, reader, *t, begin, end, fd,
                       at + static_cast<uint64_t>(begin) * t->element_size, tmp, piece.get(),
                       chunk_buffer, chunk_capacity);
      }
      at += t->bytes;
    }
    if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus(errno, absl::StrCat("fsync ", tmp));
    ::close(fd);
    if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      s = ErrnoStatus(errno, absl::StrCat("rename ", tmp));
    }
    if (!s.ok()) {
      ::unlink(tmp.c_str());
      return s;
    }
    log << path << ": " << files[f].size() << " tensors, " << at << " bytes\n";
  }
  std::string index = absl::StrCat("{\"metadata\":{\"total_size\":", total, "},\"weight_map\":{");
  bool first = true;
  for (const auto& [tensor, file] : weight_map) {
    absl::StrAppend(&index, first ? "" : ",", JsonString(tensor), ":", JsonString(file));
    first = false;
  }
  index += "}}\n";
  const std::string index_path = absl::StrCat(o.out_dir, "/model.safetensors.index.json");
  if (absl::Status s = WriteFileAtomically(index_path, index); !s.ok()) return s;
  log << index_path << ": " << weight_map.size() << " tensors, " << total << " bytes\n";
  return absl::OkStatus();
}

}  // namespace ckpt::ctl
