#include "daemon/coordinator/save_planner.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/coordinator/manifest_check.h"
#include "proto/lib/align.h"
#include "proto/lib/dtype.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/status_context.h"
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
  std::vector<size_t> shards;  // into the plan's ShardRefs, in plan order
  int64_t covered = 0;         // elements of its distinct regions
};

// One shard as listed by a rank, in plan order (host, rank, index).
struct ShardRef {
  Holder holder;
  const v1::TensorShard* shard = nullptr;
  ShardGeometry geometry;
  std::pair<int64_t, int64_t> span;  // flattened [first, end); {0, 0} if empty
  size_t distinct = 0;               // index of its distinct region: the ShardRef that heads it
};

std::string ShapeString(const geo::Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

std::string FileName(const std::string& host, int writer) {
  return absl::StrCat("data/", host, "-", writer, ".bin");
}

// Sets each of the tensor's ShardRefs' `distinct` and the tensor's
// `covered`. A sweep over the regions' flattened spans: a region is compared
// only with the distinct regions whose spans it meets (row and flat splits
// meet none, so this is linear for them; column splits all meet, so the
// cost is quadratic in their number, which --max_regions_per_tensor bounds).
absl::Status GroupRegions(const std::string& fqn, TensorInfo& info, std::vector<ShardRef>& refs,
                          const RequestLimits& limits) {
  std::vector<size_t> order = info.shards;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return refs[a].span < refs[b].span; });
  auto region_string = [&](size_t r) { return refs[r].geometry.region.DebugString(); };
  auto twice = [&](size_t r) {
    return Invalid(absl::StrCat("rank ", refs[r].holder.rank, " lists tensor ", fqn, " region ",
                                region_string(r), " twice"));
  };
  // Replicas are grouped in plan order, so a rank that lists one region
  // twice has its two entries next to each other in the group.
  std::map<size_t, int> last_rank;  // distinct head -> rank of its latest holder
  auto join = [&](size_t r, size_t head) -> absl::Status {
    auto [it, inserted] = last_rank.try_emplace(head, refs[r].holder.rank);
    if (!inserted) {
      if (it->second == refs[r].holder.rank) return twice(r);
      it->second = refs[r].holder.rank;
    }
    refs[r].distinct = head;
    return absl::OkStatus();
  };
  int64_t distinct = 0;
  auto add_distinct = [&](size_t r) -> absl::Status {
    if (++distinct > limits.max_regions_per_tensor) {
      return absl::ResourceExhaustedError(
          absl::StrCat("tensor ", fqn, " has more than ", limits.max_regions_per_tensor,
                       " distinct regions in one save; the limit is ",
                       limits.max_regions_per_tensor, " (--max_regions_per_tensor)"));
    }
    info.covered += refs[r].geometry.elements;
    return join(r, r);
  };
  // Plan order within equal spans (stable sort) makes the head of every
  // group its first holder in plan order.
  std::vector<size_t> active;  // distinct heads whose span may meet later ones
  std::optional<size_t> empty_head;
  for (size_t r : order) {
    ShardRef& ref = refs[r];
    if (ref.geometry.elements == 0) {
      // Every empty region of a tensor holds the same (no) elements.
      if (!empty_head) {
        empty_head = r;
        if (absl::Status s = add_distinct(r); !s.ok()) return s;
      } else if (absl::Status s = join(r, *empty_head); !s.ok()) {
        return s;
      }
      continue;
    }
    std::erase_if(active, [&](size_t a) { return refs[a].span.second <= ref.span.first; });
    std::optional<size_t> same;
    for (size_t a : active) {
      absl::StatusOr<int64_t> common =
          geo::CommonElements(info.shape, refs[a].geometry.region, ref.geometry.region);
      if (!common.ok()) return common.status();
      if (*common == 0) continue;
      if (*common == ref.geometry.elements && *common == refs[a].geometry.elements) {
        same = a;
        break;
      }
      return Invalid(absl::StrCat("tensor ", fqn, ": region ", region_string(a), " of rank ",
                                  refs[a].holder.rank, " overlaps region ", region_string(r),
                                  " of rank ", ref.holder.rank,
                                  " (distinct regions may not overlap)"));
    }
    if (same) {
      if (absl::Status s = join(r, *same); !s.ok()) return s;
    } else {
      if (absl::Status s = add_distinct(r); !s.ok()) return s;
      active.push_back(r);
    }
  }
  return absl::OkStatus();
}

}  // namespace

// The options and what every host must agree on, checked once on the
// first host before anything is sized from them.
absl::Status ValidateSaveHeader(const v1::NodeSavePlan& first, const SavePlannerOptions& options) {
  if (options.alignment == 0 || (options.alignment & (options.alignment - 1)) != 0) {
    return Invalid(absl::StrCat("alignment ", options.alignment, " is not a power of two"));
  }
  if (options.chunk_bytes == 0 || options.chunk_bytes % options.alignment != 0) {
    return Invalid(absl::StrCat("chunk size ", options.chunk_bytes,
                                " is not a positive multiple of ", options.alignment));
  }
  if (absl::Status s = ValidateBoundedName("job", first.job(), options.limits); !s.ok()) return s;
  if (first.step() < 0) return Invalid(absl::StrCat("step ", first.step(), " is negative"));
  const int world_size = first.world_size();
  if (world_size <= 0) return Invalid(absl::StrCat("world size ", world_size, " is not positive"));
  if (world_size > options.limits.max_world_size) {
    return absl::ResourceExhaustedError(absl::StrCat("world size ", world_size, "; the limit is ",
                                                     options.limits.max_world_size,
                                                     " (--max_world_size)"));
  }
  return ValidateUserMetadata(first.user_metadata(), options.limits);
}

namespace {

// Every rank of the job exactly once, on hosts that agree with the first
// and appear once: the assignment indexes ranks and hosts by these numbers.
absl::Status ValidateHostsAndRanks(absl::Span<const v1::NodeSavePlan> nodes) {
  const v1::NodeSavePlan& first = nodes.front();
  const int world_size = first.world_size();
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
      if (seen_rank[rank.rank()]) {
        return Invalid(absl::StrCat("rank ", rank.rank(), " appears twice"));
      }
      seen_rank[rank.rank()] = true;
    }
  }
  for (int r = 0; r < world_size; ++r) {
    if (!seen_rank[r]) return Invalid(absl::StrCat("rank ", r, " of ", world_size, " has no plan"));
  }
  return absl::OkStatus();
}

// Every shard of the plan, in plan order, and the tensors they belong to.
struct Shards {
  std::vector<ShardRef> refs;
  std::map<std::string, TensorInfo> tensors;
};

// Validates each shard against the limits before its geometry is used, and
// checks that the ranks agree on each tensor's dtype and shape: replicas
// and coverage are only meaningful within one tensor's index space.
absl::StatusOr<Shards> CollectShards(absl::Span<const v1::NodeSavePlan> nodes,
                                     const RequestLimits& limits) {
  Shards out;
  for (int h = 0; h < static_cast<int>(nodes.size()); ++h) {
    for (const v1::RankSavePlan& rank : nodes[h].ranks()) {
      const std::string who = absl::StrCat("rank ", rank.rank());
      if (rank.shards_size() > limits.max_tensors_per_plan) {
        return absl::ResourceExhaustedError(
            absl::StrCat(who, ": plan has ", rank.shards_size(), " tensors; the limit is ",
                         limits.max_tensors_per_plan, " (--max_tensors_per_plan)"));
      }
      if (rank.objects_size() > limits.max_objects_per_plan) {
        return absl::ResourceExhaustedError(
            absl::StrCat(who, ": plan has ", rank.objects_size(), " objects; the limit is ",
                         limits.max_objects_per_plan, " (--max_objects_per_plan)"));
      }
      for (int i = 0; i < rank.shards_size(); ++i) {
        const v1::TensorShard& shard = rank.shards(i);
        if (absl::StatusOr<int64_t> b = ValidateShardRequest(shard, limits); !b.ok()) {
          return WithContext(b.status(), who);
        }
        ShardRef ref;
        ref.holder = {h, rank.rank(), static_cast<uint32_t>(i)};
        ref.shard = &shard;
        ref.geometry = *ValidateShard(shard);
        ref.span = *geo::RegionSpan(ref.geometry.shape, ref.geometry.region);
        auto [it, inserted] = out.tensors.try_emplace(shard.fqn());
        TensorInfo& info = it->second;
        if (inserted) {
          info.dtype = shard.dtype();
          info.shape = ref.geometry.shape;
          info.first_rank = rank.rank();
          info.elements = *geo::NumElements(ref.geometry.shape);
        } else if (info.dtype != shard.dtype() || info.shape != ref.geometry.shape) {
          return Invalid(absl::StrCat("tensor ", shard.fqn(), ": rank ", rank.rank(), " has dtype ",
                                      DTypeName(shard.dtype()), " shape ",
                                      ShapeString(ref.geometry.shape), " but rank ",
                                      info.first_rank, " has dtype ", DTypeName(info.dtype),
                                      " shape ", ShapeString(info.shape)));
        }
        info.shards.push_back(out.refs.size());
        out.refs.push_back(std::move(ref));
      }
    }
  }
  return out;
}

// Replicas (the same elements, whatever form the region took) join the
// first, so each is written once; distinct regions may not overlap, and a
// save that is not partial must cover every tensor.
absl::Status GroupReplicas(Shards& shards, bool partial, const RequestLimits& limits) {
  for (auto& [fqn, info] : shards.tensors) {
    if (absl::Status s = GroupRegions(fqn, info, shards.refs, limits); !s.ok()) return s;
    if (!partial && info.covered != info.elements) {
      return Invalid(absl::StrCat("tensor ", fqn, " shape ", ShapeString(info.shape),
                                  ": the save covers ", info.covered, " of ", info.elements,
                                  " elements (mark the save partial to allow this)"));
    }
  }
  return absl::OkStatus();
}

// The things to write, in plan order: a distinct region becomes an item at
// its first holder, objects where they are listed (a global object once,
// whoever lists it). Plan order makes the assignment deterministic.
absl::StatusOr<std::vector<UniqueItem>> CollectItems(absl::Span<const v1::NodeSavePlan> nodes,
                                                     const std::vector<ShardRef>& refs,
                                                     const RequestLimits& limits) {
  std::vector<UniqueItem> items;
  std::vector<size_t> item_of_ref(refs.size(), 0);
  std::map<std::string, size_t> global_objects;
  size_t next_ref = 0;
  for (int h = 0; h < static_cast<int>(nodes.size()); ++h) {
    for (const v1::RankSavePlan& rank : nodes[h].ranks()) {
      for (int i = 0; i < rank.shards_size(); ++i, ++next_ref) {
        const ShardRef& ref = refs[next_ref];
        if (ref.distinct == next_ref) {
          UniqueItem item;
          item.name = ref.shard->fqn();
          item.bytes = ref.geometry.bytes;
          item.shard = ref.shard;
          item_of_ref[next_ref] = items.size();
          items.push_back(std::move(item));
        }
        items[item_of_ref[ref.distinct]].holders.push_back(ref.holder);
      }
      std::set<std::string> own_objects;
      for (int i = 0; i < rank.objects_size(); ++i) {
        const v1::ObjectDesc& object = rank.objects(i);
        if (absl::Status s = ValidateBoundedName("object", object.key(), limits); !s.ok()) {
          return WithContext(s, absl::StrCat("rank ", rank.rank()));
        }
        if (object.length() > static_cast<uint64_t>(limits.max_object_bytes)) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "rank ", rank.rank(), ": object ", object.key(), " has ", object.length(),
              " bytes; the limit is ", limits.max_object_bytes, " (--max_object_bytes)"));
        }
        if (!own_objects.insert(object.key()).second) {
          return Invalid(
              absl::StrCat("rank ", rank.rank(), " lists object ", object.key(), " twice"));
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
            return Invalid(absl::StrCat("global object ", object.key(), " has ", object.length(),
                                        " bytes on rank ", rank.rank(), " but ",
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
  return items;
}

// Worst-fit, largest first (DESIGN.md §4.2): each item to the least-loaded
// host among its holders, then that host's least-loaded rank, then its
// least-loaded writer file, at the file's next aligned offset. Largest
// first keeps the loads within about one item of each other. Items held on
// one host only go first: they have no choice of host, and replicas placed
// before them could not even out what they add (a replica of every rank
// would land on the first host, which then also writes its own shards).
// Sets each item's writer and offset; returns the items in assignment order.
std::vector<size_t> AssignWriters(absl::Span<const v1::NodeSavePlan> nodes,
                                  std::vector<UniqueItem>& items, uint64_t alignment) {
  std::vector<size_t> order(items.size());
  std::vector<char> one_host(items.size(), 1);
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    for (const Holder& holder : items[i].holders) {
      if (holder.host != items[i].holders.front().host) one_host[i] = 0;
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(one_host[b], items[b].bytes, items[a].name) <
           std::tie(one_host[a], items[a].bytes, items[b].name);
  });
  std::vector<uint64_t> host_load(nodes.size(), 0);
  std::vector<uint64_t> rank_load(nodes.front().world_size(), 0);
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
    item.writer_thread =
        static_cast<int>(std::min_element(writers.begin(), writers.end()) - writers.begin());
    item.file_offset = writers[item.writer_thread];
    const uint64_t padded = AlignUp(static_cast<uint64_t>(item.bytes), alignment);
    writers[item.writer_thread] += padded;
    host_load[best->host] += padded;
    rank_load[best->rank] += padded;
  }
  return order;
}

// The manifest lists every chunk of every item, and so do the plan and the
// commit's checksum report: the chunks are counted before any is built (one
// column of a tall tensor is a short request for millions of them). No
// overflow: each item is at most 2^40 bytes (--max_shard_bytes) and the
// items at most ~2^33 (tensors per plan times ranks).
absl::StatusOr<uint64_t> CountChunks(const std::vector<UniqueItem>& items,
                                     const SavePlannerOptions& options) {
  uint64_t chunks = 0;
  for (const UniqueItem& item : items) {
    const uint64_t bytes = static_cast<uint64_t>(item.bytes);
    chunks += item.is_object ? 1 : (bytes + options.chunk_bytes - 1) / options.chunk_bytes;
  }
  if (chunks > static_cast<uint64_t>(options.limits.max_chunks_per_save)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the save needs ", chunks, " chunks of ", options.chunk_bytes,
                     " bytes; the limit is ", options.limits.max_chunks_per_save,
                     " (--max_chunks_per_save; a larger --chunk_bytes needs fewer)"));
  }
  return chunks;
}

// Whatever the ranks sent, the checkpoint must load: tensors, shards or
// chunks of all ranks together past the manifest's bounds, several hosts'
// metadata merged past them, or a manifest too large to read back would
// otherwise commit a step that every load refuses. `chunks` as counted by
// CountChunks: each chunk's CRC (up to 6 bytes with its tag) is filled in
// at commit.
absl::Status CheckLoadable(const v1::CheckpointManifest& manifest, uint64_t chunks,
                           const SavePlannerOptions& options) {
  if (absl::Status s = ValidateManifest(manifest, manifest.job(), manifest.step(),
                                        "the plan's manifest", options.manifest_limits);
      !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the save would commit a checkpoint that cannot be loaded: ", s.message()));
  }
  const uint64_t bytes = manifest.ByteSizeLong() + 6 * chunks;
  if (bytes > options.manifest_limits.max_manifest_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the save needs a manifest of about ", bytes, " bytes; the limit is ",
                     options.manifest_limits.max_manifest_bytes, " (--max_manifest_bytes)"));
  }
  return absl::OkStatus();
}

// The assignment, and the manifest the commit will write with every chunk
// placed: the commit then only fills in checksums, so what is committed is
// exactly what was planned.
v1::SaveAssignment BuildAssignment(absl::Span<const v1::NodeSavePlan> nodes,
                                   const std::map<std::string, TensorInfo>& tensors,
                                   const std::vector<UniqueItem>& items,
                                   const std::vector<size_t>& order,
                                   const SavePlannerOptions& options) {
  const v1::NodeSavePlan& first = nodes.front();
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
  manifest.mutable_topology()->set_world_size(first.world_size());
  for (const v1::NodeSavePlan& node : nodes) {
    *manifest.mutable_topology()->add_hosts() = node.host();
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
      // A 0-byte object's chunk is complete here: nothing is written for it
      // and its crc32c (0, the CRC32C of no bytes) is final.
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

}  // namespace

absl::StatusOr<v1::SaveAssignment> PlanSave(absl::Span<const v1::NodeSavePlan> nodes,
                                            const SavePlannerOptions& options) {
  if (nodes.empty()) return Invalid("save plan has no hosts");
  if (absl::Status s = ValidateSaveHeader(nodes.front(), options); !s.ok()) return s;
  if (absl::Status s = ValidateHostsAndRanks(nodes); !s.ok()) return s;
  absl::StatusOr<Shards> shards = CollectShards(nodes, options.limits);
  if (!shards.ok()) return shards.status();
  if (absl::Status s = GroupReplicas(*shards, nodes.front().partial(), options.limits); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<UniqueItem>> items = CollectItems(nodes, shards->refs, options.limits);
  if (!items.ok()) return items.status();
  absl::StatusOr<uint64_t> chunks = CountChunks(*items, options);
  if (!chunks.ok()) return chunks.status();
  const std::vector<size_t> order = AssignWriters(nodes, *items, options.alignment);
  v1::SaveAssignment assignment = BuildAssignment(nodes, shards->tensors, *items, order, options);
  if (absl::Status s = CheckLoadable(assignment.manifest_template(), *chunks, options); !s.ok()) {
    return s;
  }
  return assignment;
}

}  // namespace ckpt::coordinator
