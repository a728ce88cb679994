#include "daemon/coordinator/save_planner.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/lib/dtype.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/validation.h"

namespace ckpt::coordinator {
namespace {

// Where one copy of a shard or object lives.
struct Holder {
  int host = 0;  // index into nodes
  int rank = 0;
  uint32_t index = 0;  // into the rank's shards or objects
};

// A unique thing to write: one distinct region of a tensor, or one object.
struct UniqueItem {
  bool is_object = false;
  std::string name;  // fqn or object key
  int64_t bytes = 0;
  const v1::TensorShard* shard = nullptr;  // first holder's descriptor
  const v1::ObjectDesc* object = nullptr;
  int object_rank = -1;  // -1 for a global object
  std::vector<Holder> holders;
  // Assignment.
  Holder writer;
  int writer_thread = 0;
  uint64_t file_offset = 0;
};

struct TensorInfo {
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  geo::Shape shape;
  int first_rank = 0;
  int64_t elements = 0;
  // Distinct regions, keyed by their canonical element runs.
  std::map<std::vector<std::pair<int64_t, int64_t>>, size_t> regions;  // -> UniqueItem index
};

std::string ShapeString(const geo::Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

std::string FileName(const std::string& host, int writer) {
  return absl::StrCat("data/", host, "-", writer, ".bin");
}

}  // namespace

absl::StatusOr<v1::SaveAssignment> PlanSave(absl::Span<const v1::NodeSavePlan> nodes,
                                            const SavePlannerOptions& options) {
  if (nodes.empty()) return Invalid("save plan has no hosts");
  if (options.chunk_bytes == 0 || options.chunk_bytes % options.alignment != 0) {
    return Invalid(absl::StrCat("chunk size ", options.chunk_bytes,
                                " is not a positive multiple of ", options.alignment));
  }
  const v1::NodeSavePlan& first = nodes.front();
  if (absl::Status s = ValidateName("job", first.job()); !s.ok()) return s;
  if (first.step() < 0) return Invalid(absl::StrCat("step ", first.step(), " is negative"));
  const int world_size = first.world_size();
  if (world_size <= 0) return Invalid(absl::StrCat("world size ", world_size, " is not positive"));

  // Hosts and ranks: every rank of the job exactly once.
  std::set<std::string> host_names;
  std::vector<bool> seen_rank(world_size, false);
  for (const v1::NodeSavePlan& node : nodes) {
    if (node.job() != first.job() || node.step() != first.step() ||
        node.world_size() != world_size || node.partial() != first.partial()) {
      return Invalid(absl::StrCat("host ", node.host().host(),
                                  " disagrees on job, step, world size or partial"));
    }
    if (absl::Status s = ValidateName("host", node.host().host()); !s.ok()) return s;
    if (!host_names.insert(node.host().host()).second) {
      return Invalid(absl::StrCat("host ", node.host().host(), " appears twice in the plan"));
    }
    if (node.writer_threads() <= 0) {
      return Invalid(absl::StrCat("host ", node.host().host(), " has no writer threads"));
    }
    for (const v1::RankSavePlan& rank : node.ranks()) {
      if (rank.rank() < 0 || rank.rank() >= world_size) {
        return Invalid(absl::StrCat("rank ", rank.rank(), " is outside world size ", world_size));
      }
      if (seen_rank[rank.rank()]) return Invalid(absl::StrCat("rank ", rank.rank(), " appears twice"));
      seen_rank[rank.rank()] = true;
    }
  }
  for (int r = 0; r < world_size; ++r) {
    if (!seen_rank[r]) return Invalid(absl::StrCat("rank ", r, " of ", world_size, " has no plan"));
  }

  // Group shards into distinct regions per tensor, and objects by key.
  std::vector<UniqueItem> items;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, size_t> global_objects;
  for (int h = 0; h < static_cast<int>(nodes.size()); ++h) {
    for (const v1::RankSavePlan& rank : nodes[h].ranks()) {
      std::set<std::pair<std::string, std::vector<std::pair<int64_t, int64_t>>>> own;
      for (int i = 0; i < rank.shards_size(); ++i) {
        const v1::TensorShard& shard = rank.shards(i);
        absl::StatusOr<ShardGeometry> g = ValidateShard(shard);
        if (!g.ok()) {
          return absl::Status(g.status().code(),
                              absl::StrCat("rank ", rank.rank(), ": ", g.status().message()));
        }
        auto [it, inserted] = tensors.try_emplace(shard.fqn());
        TensorInfo& info = it->second;
        if (inserted) {
          info.dtype = shard.dtype();
          info.shape = g->shape;
          info.first_rank = rank.rank();
          info.elements = *geo::NumElements(g->shape);
        } else if (info.dtype != shard.dtype() || info.shape != g->shape) {
          return Invalid(absl::StrCat(
              "tensor ", shard.fqn(), ": rank ", rank.rank(), " has dtype ",
              DTypeName(shard.dtype()), " shape ", ShapeString(g->shape), " but rank ",
              info.first_rank, " has dtype ", DTypeName(info.dtype), " shape ",
              ShapeString(info.shape)));
        }
        absl::StatusOr<std::vector<geo::ElementRun>> runs = geo::RegionRuns(g->shape, g->region);
        if (!runs.ok()) return runs.status();
        // Replica identity is element identity, whatever form the region took
        // (a full box and "whole" are the same shard): key by merged runs.
        std::vector<std::pair<int64_t, int64_t>> key;
        key.reserve(runs->size());
        for (const geo::ElementRun& run : *runs) {
          if (!key.empty() && key.back().first + key.back().second == run.begin) {
            key.back().second += run.length;
          } else {
            key.emplace_back(run.begin, run.length);
          }
        }
        if (!own.emplace(shard.fqn(), key).second) {
          return Invalid(absl::StrCat("rank ", rank.rank(), " lists tensor ", shard.fqn(),
                                      " region ", g->region.DebugString(), " twice"));
        }
        auto [rit, new_region] = info.regions.try_emplace(std::move(key), items.size());
        if (new_region) {
          UniqueItem item;
          item.name = shard.fqn();
          item.bytes = g->bytes;
          item.shard = &shard;
          items.push_back(std::move(item));
        }
        items[rit->second].holders.push_back({h, rank.rank(), static_cast<uint32_t>(i)});
      }
      std::set<std::string> own_objects;
      for (int i = 0; i < rank.objects_size(); ++i) {
        const v1::ObjectDesc& object = rank.objects(i);
        if (absl::Status s = ValidateName("object", object.key()); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("rank ", rank.rank(), ": ", s.message()));
        }
        if (!own_objects.insert(object.key()).second) {
          return Invalid(absl::StrCat("rank ", rank.rank(), " lists object ", object.key(), " twice"));
        }
        Holder holder{h, rank.rank(), static_cast<uint32_t>(i)};
        if (object.global()) {
          auto [git, inserted] = global_objects.try_emplace(object.key(), items.size());
          if (inserted) {
            UniqueItem item;
            item.is_object = true;
            item.name = object.key();
            item.bytes = static_cast<int64_t>(object.length());
            item.object = &object;
            items.push_back(std::move(item));
          } else if (items[git->second].object->length() != object.length()) {
            return Invalid(absl::StrCat("global object ", object.key(), " has ",
                                        object.length(), " bytes on rank ", rank.rank(), " but ",
                                        items[git->second].object->length(), " on rank ",
                                        items[git->second].holders.front().rank));
          }
          items[git->second].holders.push_back(holder);
        } else {
          UniqueItem item;
          item.is_object = true;
          item.name = object.key();
          item.bytes = static_cast<int64_t>(object.length());
          item.object = &object;
          item.object_rank = rank.rank();
          item.holders.push_back(holder);
          items.push_back(std::move(item));
        }
      }
    }
  }

  // Distinct regions must not overlap; the union must cover the tensor.
  for (const auto& [fqn, info] : tensors) {
    struct Span { int64_t begin, end; size_t item; };
    std::vector<Span> spans;
    int64_t covered = 0;
    for (const auto& [runs, item] : info.regions) {
      for (const auto& [begin, length] : runs) spans.push_back({begin, begin + length, item});
      covered += items[item].bytes / *DTypeSize(info.dtype);
    }
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].begin < spans[i - 1].end && spans[i].item != spans[i - 1].item) {
        const UniqueItem& a = items[spans[i - 1].item];
        const UniqueItem& b = items[spans[i].item];
        return Invalid(absl::StrCat(
            "tensor ", fqn, ": region ", RegionFromProto(a.shard->region()).DebugString(),
            " of rank ", a.holders.front().rank, " overlaps region ",
            RegionFromProto(b.shard->region()).DebugString(), " of rank ", b.holders.front().rank,
            " (distinct regions may not overlap)"));
      }
      spans[i].end = std::max(spans[i].end, spans[i - 1].end);
    }
    if (!first.partial() && covered != info.elements) {
      return Invalid(absl::StrCat("tensor ", fqn, " shape ", ShapeString(info.shape), ": the save covers ",
                                  covered, " of ", info.elements,
                                  " elements (mark the save partial to allow this)"));
    }
  }

  // Worst-fit assignment, largest first.
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(items[b].bytes, items[a].name) < std::tie(items[a].bytes, items[b].name);
  });
  std::vector<uint64_t> host_load(nodes.size(), 0);
  std::vector<uint64_t> rank_load(world_size, 0);
  std::vector<std::vector<uint64_t>> writer_load(nodes.size());  // aligned bytes = next offset
  for (size_t h = 0; h < nodes.size(); ++h) writer_load[h].assign(nodes[h].writer_threads(), 0);
  for (size_t i : order) {
    UniqueItem& item = items[i];
    const Holder* best = nullptr;
    for (const Holder& holder : item.holders) {
      if (best == nullptr ||
          std::tie(host_load[holder.host], rank_load[holder.rank], holder.rank) <
              std::tie(host_load[best->host], rank_load[best->rank], best->rank)) {
        best = &holder;
      }
    }
    item.writer = *best;
    std::vector<uint64_t>& writers = writer_load[best->host];
    item.writer_thread = static_cast<int>(
        std::min_element(writers.begin(), writers.end()) - writers.begin());
    item.file_offset = writers[item.writer_thread];
    const uint64_t padded = AlignUp(static_cast<uint64_t>(item.bytes), options.alignment);
    writers[item.writer_thread] += padded;
    host_load[best->host] += padded;
    rank_load[best->rank] += padded;
  }

  // The assignment and the manifest it will commit.
  v1::SaveAssignment out;
  out.set_chunk_bytes(options.chunk_bytes);
  for (const v1::NodeSavePlan& node : nodes) {
    v1::HostAssignment* host = out.add_hosts();
    *host->mutable_host() = node.host();
    for (int w = 0; w < node.writer_threads(); ++w) {
      host->add_files(FileName(node.host().host(), w));
    }
  }
  v1::CheckpointManifest& manifest = *out.mutable_manifest_template();
  manifest.set_format_version(1);
  manifest.set_job(first.job());
  manifest.set_step(first.step());
  manifest.mutable_topology()->set_world_size(world_size);
  for (const v1::NodeSavePlan& node : nodes) *manifest.mutable_topology()->add_hosts() = node.host();
  for (const v1::NodeSavePlan& node : nodes) {
    for (const auto& [k, v] : node.user_metadata()) (*manifest.mutable_user_metadata())[k] = v;
  }
  std::map<std::string, v1::TensorEntry*> entries;
  for (const auto& [fqn, info] : tensors) {
    v1::TensorEntry* entry = manifest.add_tensors();
    entry->set_fqn(fqn);
    entry->set_dtype(info.dtype);
    for (int64_t d : info.shape) entry->add_global_shape(d);
    entry->set_partial(first.partial());
    entries[fqn] = entry;
  }
  for (size_t i : order) {
    const UniqueItem& item = items[i];
    const std::string& host_name = nodes[item.writer.host].host().host();
    const std::string file = FileName(host_name, item.writer_thread);
    v1::WriteItem* write = out.mutable_hosts(item.writer.host)->add_items();
    write->set_rank(item.writer.rank);
    write->set_is_object(item.is_object);
    write->set_index(item.writer.index);
    write->set_bytes(item.bytes);
    write->set_file(file);
    write->set_writer(item.writer_thread);
    write->set_file_offset(item.file_offset);

    auto fill_chunk = [&](v1::StoredChunk* chunk, uint64_t shard_offset, uint64_t length) {
      chunk->set_file(file);
      chunk->set_file_offset(item.file_offset + shard_offset);
      chunk->set_shard_offset(shard_offset);
      chunk->set_length(length);
    };
    if (item.is_object) {
      v1::ObjectEntry* object = manifest.add_objects();
      object->set_key(item.name);
      object->set_rank(item.object_rank);
      fill_chunk(object->mutable_chunk(), 0, item.bytes);
      continue;
    }
    v1::StoredShard* stored = entries[item.name]->add_shards();
    *stored->mutable_region() = item.shard->region();
    stored->set_writer_rank(item.writer.rank);
    for (uint64_t offset = 0; offset < static_cast<uint64_t>(item.bytes);
         offset += options.chunk_bytes) {
      fill_chunk(stored->add_chunks(), offset,
                 std::min<uint64_t>(options.chunk_bytes, item.bytes - offset));
    }
  }
  return out;
}

}  // namespace ckpt::coordinator
