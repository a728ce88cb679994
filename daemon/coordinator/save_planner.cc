#include "daemon/coordinator/save_planner.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/coordinator/manifest_check.h"
#include "daemon/coordinator/planner_memory.h"
#include "daemon/coordinator/rank_form.h"
#include "daemon/coordinator/region_table.h"
#include "proto/lib/align.h"
#include "proto/lib/dtype.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt::coordinator {
namespace {

// The planner touches every shard of every rank (8 million at 8192 ranks x
// 1000 tensors), so per shard it only finds its tensor and its spelling
// (below) in hash tables and checks what may differ between replicas; all
// geometry is worked out once per spelling, and all that follows is per
// unique item. Nothing per shard allocates.

// Where one copy of a shard or object lives.
struct Holder {
  int host = 0;  // index into nodes
  int rank = 0;
  uint32_t index = 0;  // into the rank's shards or objects
};

struct TensorInfo {
  absl::string_view fqn;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  geo::Shape shape;
  int like = 0;  // tensors of one dtype and shape share this number
  int first_rank = 0;
  int64_t elements = 0;
  int64_t covered = 0;  // elements of its distinct regions
};

// One way a region of a tensor was written down (a box, a flat range, the
// whole tensor), as first sent in plan order. Replicas are nearly always
// spelled alike; two spellings of the same elements (a box and a flat
// range) are one region.
struct Spelling {
  int tensor = 0;
  const v1::TensorShard* shard = nullptr;  // its first holder's
  int first_rank = 0;                      // that holder's rank
  std::pair<int64_t, int64_t> span;        // flattened [first, end); {0, 0} if empty
  int64_t elements = 0;
  int64_t bytes = 0;
  uint32_t region = 0;  // the spelling that heads its distinct region
};

// Every shard of the plan: its spelling, in plan order (host, rank, index).
struct Shards {
  std::vector<TensorInfo> tensors;
  std::vector<Spelling> spellings;
  std::vector<uint32_t> spelling_of_shard;
};

// A unique thing to write: one distinct region of a tensor, or one object.
struct UniqueItem {
  bool is_object = false;
  int tensor = -1;                         // of a shard
  const v1::TensorShard* shard = nullptr;  // its first holder's descriptor
  const v1::ObjectDesc* object = nullptr;  // or the object's
  int object_rank = -1;                    // -1 for a global object
  int64_t bytes = 0;
  uint32_t name_order = 0;  // rank of its fqn or key among all names
  // Assignment.
  Holder writer;
  int writer_thread = 0;
  uint64_t file_offset = 0;
};

// The items and their holders, each item's a contiguous range.
struct Items {
  std::vector<UniqueItem> items;
  std::vector<uint32_t> first_holder;  // items.size() + 1 bounds into holders
  std::vector<Holder> holders;

  absl::Span<const Holder> HoldersOf(size_t item) const {
    return absl::MakeConstSpan(holders).subspan(first_holder[item],
                                                first_holder[item + 1] - first_holder[item]);
  }
};

std::string ShapeString(const geo::Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

std::string FileName(const std::string& host, int writer) {
  return absl::StrCat("data/", host, "-", writer, ".bin");
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

// How many shards ahead region lookups are prefetched: about as many as
// the memory has in flight while one shard is handled.
constexpr int kPrefetchAhead = 8;

// Finds each shard's tensor and spelling. A tensor's first shard and each
// new spelling are validated in full against the limits before their
// geometry is used; a replica of a known spelling only has its tensor's
// dtype and shape compared (ranks must agree: replicas and coverage only
// mean something within one tensor's index space) and its own device
// buffer checked.
// A rank whose shards are an earlier rank's (RankForm) takes that rank's
// spellings; the others' are looked up shard by shard.
absl::StatusOr<Shards> CollectShards(absl::Span<const v1::NodeSavePlan> nodes,
                                     const RequestLimits& limits) {
  Shards out;
  absl::flat_hash_map<absl::string_view, int> tensor_by_fqn;
  RegionTable regions;  // spelling ids are its ids
  // Ranks list their tensors in the same order: the tensor of the previous
  // rank's i-th shard is the likely one, found with one comparison.
  std::vector<int> tensor_hint;
  std::vector<int> tensor_of;  // this rank's shards'
  RankForm form;
  RankForms known;
  // Numbers for (dtype, shape), and one rank's validated geometries by
  // (that number, region of its form).
  std::map<std::pair<v1::DType, std::vector<int64_t>>, int> likes;
  struct Geometry {
    std::pair<int64_t, int64_t> span;
    int64_t elements = 0;
    int64_t bytes = 0;
  };
  absl::flat_hash_map<uint64_t, Geometry> geometries;
  size_t total = 0;
  for (const v1::NodeSavePlan& node : nodes) {
    for (const v1::RankSavePlan& rank : node.ranks()) total += rank.shards_size();
  }
  out.spelling_of_shard.reserve(total);
  for (const v1::NodeSavePlan& node : nodes) {
    for (const v1::RankSavePlan& rank : node.ranks()) {
      const auto who = [&] { return absl::StrCat("rank ", rank.rank()); };
      if (rank.shards_size() > limits.max_tensors_per_plan) {
        return absl::ResourceExhaustedError(
            absl::StrCat(who(), ": plan has ", rank.shards_size(), " tensors; the limit is ",
                         limits.max_tensors_per_plan, " (--max_tensors_per_plan)"));
      }
      if (rank.objects_size() > limits.max_objects_per_plan) {
        return absl::ResourceExhaustedError(
            absl::StrCat(who(), ": plan has ", rank.objects_size(), " objects; the limit is ",
                         limits.max_objects_per_plan, " (--max_objects_per_plan)"));
      }
      if (tensor_hint.size() < static_cast<size_t>(rank.shards_size())) {
        tensor_hint.resize(rank.shards_size(), -1);
      }
      // Each shard's tensor, checked against what earlier ranks said of it.
      tensor_of.clear();
      form.Clear();
      for (int i = 0; i < rank.shards_size(); ++i) {
        const v1::TensorShard& shard = rank.shards(i);
        int t = tensor_hint[i];
        if (t < 0 || out.tensors[t].fqn != shard.fqn()) {
          auto found = tensor_by_fqn.find(shard.fqn());
          if (found != tensor_by_fqn.end()) {
            t = found->second;
          } else {
            absl::StatusOr<ShardGeometry> g = ValidateShardRequestGeometry(shard, limits);
            if (!g.ok()) return WithContext(g.status(), who());
            t = static_cast<int>(out.tensors.size());
            tensor_by_fqn.emplace(shard.fqn(), t);
            TensorInfo& info = out.tensors.emplace_back();
            info.fqn = shard.fqn();
            info.dtype = shard.dtype();
            info.shape = g->shape;
            info.first_rank = rank.rank();
            info.elements = *geo::NumElements(g->shape);
            info.like =
                likes
                    .try_emplace(std::make_pair(info.dtype, std::vector<int64_t>(info.shape.begin(),
                                                                                 info.shape.end())),
                                 static_cast<int>(likes.size()))
                    .first->second;
          }
          tensor_hint[i] = t;
        }
        const TensorInfo& info = out.tensors[t];
        if (info.dtype != shard.dtype() ||
            !std::equal(info.shape.begin(), info.shape.end(), shard.global_shape().begin(),
                        shard.global_shape().end())) {
          if (shard.global_shape_size() > limits.max_dims) {
            return WithContext(ValidateShardRequest(shard, limits).status(), who());
          }
          return Invalid(absl::StrCat("tensor ", shard.fqn(), ": rank ", rank.rank(), " has dtype ",
                                      DTypeName(shard.dtype()), " shape ",
                                      ShapeString(ShapeFromProto(shard.global_shape())),
                                      " but rank ", info.first_rank, " has dtype ",
                                      DTypeName(info.dtype), " shape ", ShapeString(info.shape)));
        }
        // The box is read from here on: its size is checked first.
        const v1::Box& box = shard.region().box();
        if (box.offsets_size() > limits.max_dims || box.lengths_size() > limits.max_dims) {
          return WithContext(ValidateShardRequest(shard, limits).status(), who());
        }
        tensor_of.push_back(t);
        form.Add(t, shard.region());
      }
      // A replica of an earlier rank: its spellings, and only its own
      // device buffers to check.
      if (const RankForms::Known* same = known.Find(form)) {
        for (int i = 0; i < rank.shards_size(); ++i) {
          const uint32_t id = out.spelling_of_shard[same->first + i];
          if (absl::Status s = ValidateDeviceBuffer(rank.shards(i), out.spellings[id].bytes);
              !s.ok()) {
            return WithContext(s, who());
          }
          out.spelling_of_shard.push_back(id);
        }
        continue;
      }
      const size_t first = out.spelling_of_shard.size();
      geometries.clear();
      for (int i = 0; i < rank.shards_size(); ++i) {
        // The region a few shards on: its lookup's memory is loading while
        // these are done.
        if (const int ahead = i + kPrefetchAhead; ahead < rank.shards_size()) {
          regions.Prefetch(tensor_of[ahead], rank.shards(ahead).region(), limits.max_dims);
        }
        const v1::TensorShard& shard = rank.shards(i);
        const int t = tensor_of[i];
        const auto [id, fresh] = regions.Intern(t, shard.region());
        if (fresh) {
          Spelling& spelling = out.spellings.emplace_back();
          spelling.tensor = t;
          spelling.shard = &shard;
          spelling.first_rank = rank.rank();
          // A region of the rank's form in tensors alike (the layers of a
          // model) has the same geometry: validated once per rank.
          const uint64_t key =
              form.valid ? static_cast<uint64_t>(out.tensors[t].like) << 8 | form.RegionOf(i) : 0;
          auto known_geometry = form.valid ? geometries.find(key) : geometries.end();
          if (known_geometry != geometries.end()) {
            if (absl::Status s = ValidateDeviceBuffer(shard, known_geometry->second.bytes);
                !s.ok()) {
              return WithContext(s, who());
            }
            spelling.span = known_geometry->second.span;
            spelling.elements = known_geometry->second.elements;
            spelling.bytes = known_geometry->second.bytes;
          } else {
            absl::StatusOr<ShardGeometry> g = ValidateShardRequestGeometry(shard, limits);
            if (!g.ok()) return WithContext(g.status(), who());
            spelling.span = *geo::RegionSpan(g->shape, g->region);
            spelling.elements = g->elements;
            spelling.bytes = g->bytes;
            if (form.valid) geometries[key] = {spelling.span, spelling.elements, spelling.bytes};
          }
        } else if (absl::Status s = ValidateDeviceBuffer(shard, out.spellings[id].bytes); !s.ok()) {
          return WithContext(s, who());
        }
        out.spelling_of_shard.push_back(id);
      }
      known.Add(form, first);
    }
  }
  return out;
}

// Sets each spelling's region: spellings of the same elements (the same
// span and count: a box or range is fixed by its first and last element
// and whether it is contiguous) share the one first in plan order. Distinct
// regions may not overlap, and a save that is not partial must cover every
// tensor. Overlap is a sweep over the regions' spans: a region is compared
// only with the earlier ones whose spans it meets (row and flat splits meet
// none, so this is linear for them; column splits all meet, so the cost is
// quadratic in their number, which --max_regions_per_tensor bounds).
absl::Status GroupRegions(Shards& shards, bool partial, const RequestLimits& limits) {
  std::vector<Spelling>& spellings = shards.spellings;
  // Spellings by tensor, in plan order within each.
  std::vector<uint32_t> first(shards.tensors.size() + 1, 0);
  for (const Spelling& s : spellings) ++first[s.tensor + 1];
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<uint32_t> by_tensor(spellings.size());
  {
    std::vector<uint32_t> next(first.begin(), first.end() - 1);
    for (uint32_t k = 0; k < spellings.size(); ++k) by_tensor[next[spellings[k].tensor]++] = k;
  }
  for (size_t t = 0; t < shards.tensors.size(); ++t) {
    TensorInfo& info = shards.tensors[t];
    const auto begin = by_tensor.begin() + first[t];
    const auto end = by_tensor.begin() + first[t + 1];
    {
      // Sorted on plain keys: a tensor's spellings lie far apart.
      struct Key {
        std::pair<int64_t, int64_t> span;
        int64_t elements;
        uint32_t spelling;
      };
      std::vector<Key> keys;
      keys.reserve(end - begin);
      for (auto it = begin; it != end; ++it) {
        keys.push_back({spellings[*it].span, spellings[*it].elements, *it});
      }
      std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
        return std::tie(a.span, a.elements, a.spelling) < std::tie(b.span, b.elements, b.spelling);
      });
      for (size_t k = 0; k < keys.size(); ++k) begin[k] = keys[k].spelling;
    }
    const auto region_string = [&](uint32_t k) {
      return RegionFromProto(spellings[k].shard->region()).DebugString();
    };
    int64_t distinct = 0;
    std::vector<uint32_t> active;  // distinct heads whose span may meet later ones
    for (auto it = begin; it != end; ++it) {
      Spelling& s = spellings[*it];
      if (it != begin) {
        const Spelling& prev = spellings[*(it - 1)];
        if (prev.span == s.span && prev.elements == s.elements) {
          s.region = prev.region;
          continue;
        }
      }
      s.region = *it;
      if (++distinct > limits.max_regions_per_tensor) {
        return absl::ResourceExhaustedError(
            absl::StrCat("tensor ", info.fqn, " has more than ", limits.max_regions_per_tensor,
                         " distinct regions in one save; the limit is ",
                         limits.max_regions_per_tensor, " (--max_regions_per_tensor)"));
      }
      info.covered += s.elements;
      if (s.elements == 0) continue;  // meets nothing
      std::erase_if(active, [&](uint32_t a) { return spellings[a].span.second <= s.span.first; });
      if (!active.empty()) {
        const geo::Region region = RegionFromProto(s.shard->region());
        for (uint32_t a : active) {
          absl::StatusOr<int64_t> common = geo::CommonElements(
              info.shape, RegionFromProto(spellings[a].shard->region()), region);
          if (!common.ok()) return common.status();
          if (*common == 0) continue;
          return Invalid(absl::StrCat("tensor ", info.fqn, ": region ", region_string(a),
                                      " of rank ", spellings[a].first_rank, " overlaps region ",
                                      region_string(*it), " of rank ", s.first_rank,
                                      " (distinct regions may not overlap)"));
        }
      }
      active.push_back(*it);
    }
    if (!partial && info.covered != info.elements) {
      return Invalid(absl::StrCat("tensor ", info.fqn, " shape ", ShapeString(info.shape),
                                  ": the save covers ", info.covered, " of ", info.elements,
                                  " elements (mark the save partial to allow this)"));
    }
  }
  return absl::OkStatus();
}

// The things to write, in plan order: a distinct region becomes an item at
// its first holder, objects where they are listed (a global object once,
// whoever lists it). Plan order makes the assignment deterministic. A rank
// that lists one region twice (in any spelling) is refused.
absl::StatusOr<Items> CollectItems(absl::Span<const v1::NodeSavePlan> nodes, Shards& shards,
                                   const RequestLimits& limits) {
  Items out;
  std::vector<UniqueItem>& items = out.items;
  // Each shard's item, written over its spelling (read just before).
  std::vector<uint32_t>& item_of_shard = shards.spelling_of_shard;
  std::vector<std::pair<uint32_t, Holder>> object_holders;
  std::vector<int32_t> item_of_region(shards.spellings.size(), -1);  // by head spelling
  std::vector<int32_t> last_rank(shards.spellings.size(), -1);       // by head spelling
  absl::flat_hash_map<absl::string_view, uint32_t> global_objects;
  size_t next_shard = 0;
  for (int h = 0; h < static_cast<int>(nodes.size()); ++h) {
    for (const v1::RankSavePlan& rank : nodes[h].ranks()) {
      for (int i = 0; i < rank.shards_size(); ++i, ++next_shard) {
        const Spelling& spelling = shards.spellings[item_of_shard[next_shard]];
        const uint32_t region = spelling.region;
        if (last_rank[region] == rank.rank()) {
          return Invalid(
              absl::StrCat("rank ", rank.rank(), " lists tensor ", rank.shards(i).fqn(), " region ",
                           RegionFromProto(rank.shards(i).region()).DebugString(), " twice"));
        }
        last_rank[region] = rank.rank();
        if (item_of_region[region] < 0) {
          const Spelling& head = shards.spellings[region];
          item_of_region[region] = static_cast<int32_t>(items.size());
          UniqueItem& item = items.emplace_back();
          item.tensor = head.tensor;
          item.shard = head.shard;
          item.bytes = head.bytes;
        }
        item_of_shard[next_shard] = item_of_region[region];
      }
      absl::flat_hash_set<absl::string_view> own_objects;
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
        const Holder holder{h, rank.rank(), static_cast<uint32_t>(i)};
        uint32_t index = static_cast<uint32_t>(items.size());
        if (object.global()) {
          auto [git, inserted] = global_objects.try_emplace(object.key(), index);
          if (!inserted) {
            index = git->second;
            const v1::ObjectDesc& first = *items[index].object;
            if (first.length() != object.length()) {
              int holder_rank = -1;  // the first to list it
              for (const auto& [item, other] : object_holders) {
                if (item == index) {
                  holder_rank = other.rank;
                  break;
                }
              }
              return Invalid(absl::StrCat("global object ", object.key(), " has ", object.length(),
                                          " bytes on rank ", rank.rank(), " but ", first.length(),
                                          " on rank ", holder_rank));
            }
          }
        }
        if (index == items.size()) {
          UniqueItem& item = items.emplace_back();
          item.is_object = true;
          item.object = &object;
          item.bytes = static_cast<int64_t>(object.length());
          item.object_rank = object.global() ? -1 : rank.rank();
        }
        object_holders.emplace_back(index, holder);
      }
    }
  }
  // Holders by item, each item's in plan order: a second walk over the
  // plans rather than a list of (item, holder) the size of the plan.
  out.first_holder.assign(items.size() + 1, 0);
  for (uint32_t item : item_of_shard) ++out.first_holder[item + 1];
  for (const auto& [item, holder] : object_holders) ++out.first_holder[item + 1];
  std::partial_sum(out.first_holder.begin(), out.first_holder.end(), out.first_holder.begin());
  out.holders.resize(out.first_holder.back());
  std::vector<uint32_t> next(out.first_holder.begin(), out.first_holder.end() - 1);
  next_shard = 0;
  size_t next_object = 0;
  for (int h = 0; h < static_cast<int>(nodes.size()); ++h) {
    for (const v1::RankSavePlan& rank : nodes[h].ranks()) {
      for (int i = 0; i < rank.shards_size(); ++i, ++next_shard) {
        out.holders[next[item_of_shard[next_shard]]++] =
            Holder{h, rank.rank(), static_cast<uint32_t>(i)};
      }
      for (int i = 0; i < rank.objects_size(); ++i, ++next_object) {
        const auto& [item, holder] = object_holders[next_object];
        out.holders[next[item]++] = holder;
      }
    }
  }
  // Names ordered once, so sorting items compares integers.
  std::vector<absl::string_view> names;
  for (const TensorInfo& t : shards.tensors) names.push_back(t.fqn);
  for (const UniqueItem& item : items) {
    if (item.is_object) names.push_back(item.object->key());
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  absl::flat_hash_map<absl::string_view, uint32_t> order_of_name;
  for (size_t k = 0; k < names.size(); ++k) order_of_name[names[k]] = static_cast<uint32_t>(k);
  std::vector<uint32_t> tensor_order(shards.tensors.size());
  for (size_t t = 0; t < shards.tensors.size(); ++t) {
    tensor_order[t] = order_of_name[shards.tensors[t].fqn];
  }
  for (UniqueItem& item : items) {
    item.name_order =
        item.is_object ? order_of_name[item.object->key()] : tensor_order[item.tensor];
  }
  return out;
}

// Worst-fit, largest first (DESIGN.md §4.2): each item to the least-loaded
// host among its holders, then that host's least-loaded rank, then its
// least-loaded writer file, at the file's next aligned offset. Largest
// first keeps the loads within about one item of each other. Items held on
// one host only go first: they have no choice of host, and replicas placed
// before them could not even out what they add (a replica of every rank
// would land on the first host, which then also writes its own shards).
// Sets each item's writer and offset; returns the items in assignment order.
std::vector<uint32_t> AssignWriters(absl::Span<const v1::NodeSavePlan> nodes, Items& all,
                                    uint64_t alignment) {
  std::vector<UniqueItem>& items = all.items;
  // Ties in plan order: the index is the last key. Sorted on plain keys
  // next to each other, not through the items (a million at cluster scale).
  struct Key {
    bool one_host;
    int64_t bytes;
    uint32_t name_order;
    uint32_t item;
  };
  std::vector<Key> keys(items.size());
  for (uint32_t i = 0; i < items.size(); ++i) {
    const absl::Span<const Holder> holders = all.HoldersOf(i);
    const bool one_host = std::all_of(holders.begin(), holders.end(), [&](const Holder& holder) {
      return holder.host == holders.front().host;
    });
    keys[i] = {one_host, items[i].bytes, items[i].name_order, i};
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    return std::tie(b.one_host, b.bytes, a.name_order, a.item) <
           std::tie(a.one_host, a.bytes, b.name_order, b.item);
  });
  std::vector<uint32_t> order(keys.size());
  for (uint32_t k = 0; k < keys.size(); ++k) order[k] = keys[k].item;
  std::vector<uint64_t> host_load(nodes.size(), 0);
  std::vector<uint64_t> rank_load(nodes.front().world_size(), 0);
  std::vector<std::vector<uint64_t>> writer_load(nodes.size());  // aligned bytes = next offset
  for (size_t h = 0; h < nodes.size(); ++h) writer_load[h].assign(nodes[h].writer_threads(), 0);
  for (uint32_t i : order) {
    UniqueItem& item = items[i];
    const Holder* best = nullptr;
    for (const Holder& holder : all.HoldersOf(i)) {
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
void BuildAssignment(absl::Span<const v1::NodeSavePlan> nodes, const Shards& shards,
                     const std::vector<UniqueItem>& items, const std::vector<uint32_t>& order,
                     const SavePlannerOptions& options, v1::SaveAssignment& out) {
  const v1::NodeSavePlan& first = nodes.front();
  out.set_chunk_bytes(options.chunk_bytes);
  std::vector<std::vector<std::string>> files(nodes.size());
  std::vector<int> items_per_host(nodes.size(), 0);
  for (const UniqueItem& item : items) ++items_per_host[item.writer.host];
  for (size_t h = 0; h < nodes.size(); ++h) {
    v1::HostAssignment* host = out.add_hosts();
    *host->mutable_host() = nodes[h].host();
    for (int w = 0; w < nodes[h].writer_threads(); ++w) {
      files[h].push_back(FileName(nodes[h].host().host(), w));
      host->add_files(files[h].back());
    }
    host->mutable_items()->Reserve(items_per_host[h]);
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
  // Tensors in name order.
  std::vector<uint32_t> by_name(shards.tensors.size());
  std::iota(by_name.begin(), by_name.end(), 0);
  std::sort(by_name.begin(), by_name.end(),
            [&](uint32_t a, uint32_t b) { return shards.tensors[a].fqn < shards.tensors[b].fqn; });
  std::vector<v1::TensorEntry*> entries(shards.tensors.size());
  manifest.mutable_tensors()->Reserve(static_cast<int>(by_name.size()));
  for (uint32_t t : by_name) {
    const TensorInfo& info = shards.tensors[t];
    v1::TensorEntry* entry = manifest.add_tensors();
    entry->set_fqn(std::string(info.fqn));
    entry->set_dtype(info.dtype);
    for (int64_t d : info.shape) entry->add_global_shape(d);
    entry->set_partial(first.partial());
    entries[t] = entry;
  }
  for (uint32_t i : order) {
    const UniqueItem& item = items[i];
    const std::string& file = files[item.writer.host][item.writer_thread];
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
      object->set_key(item.object->key());
      object->set_rank(item.object_rank);
      // A 0-byte object's chunk is complete here: nothing is written for it
      // and its crc32c (0, the CRC32C of no bytes) is final.
      fill_chunk(object->mutable_chunk(), 0, item.bytes);
      continue;
    }
    v1::StoredShard* stored = entries[item.tensor]->add_shards();
    *stored->mutable_region() = item.shard->region();
    stored->set_writer_rank(item.writer.rank);
    for (uint64_t offset = 0; offset < static_cast<uint64_t>(item.bytes);
         offset += options.chunk_bytes) {
      fill_chunk(stored->add_chunks(), offset,
                 std::min<uint64_t>(options.chunk_bytes, item.bytes - offset));
    }
  }
}

// Plans into `out`, empty: on the heap or on an arena.
absl::Status PlanSaveInto(absl::Span<const v1::NodeSavePlan> nodes,
                          const SavePlannerOptions& options, v1::SaveAssignment& out) {
  if (nodes.empty()) return Invalid("save plan has no hosts");
  if (absl::Status s = ValidateSaveHeader(nodes.front(), options); !s.ok()) return s;
  if (absl::Status s = ValidateHostsAndRanks(nodes); !s.ok()) return s;
  absl::StatusOr<Shards> shards = CollectShards(nodes, options.limits);
  if (!shards.ok()) return shards.status();
  if (absl::Status s = GroupRegions(*shards, nodes.front().partial(), options.limits); !s.ok()) {
    return s;
  }
  absl::StatusOr<Items> items = CollectItems(nodes, *shards, options.limits);
  if (!items.ok()) return items.status();
  absl::StatusOr<uint64_t> chunks = CountChunks(items->items, options);
  if (!chunks.ok()) return chunks.status();
  const std::vector<uint32_t> order = AssignWriters(nodes, *items, options.alignment);
  BuildAssignment(nodes, *shards, items->items, order, options, out);
  return CheckLoadable(out.manifest_template(), *chunks, options);
}

}  // namespace

absl::StatusOr<v1::SaveAssignment> PlanSave(absl::Span<const v1::NodeSavePlan> nodes,
                                            const SavePlannerOptions& options) {
  v1::SaveAssignment out;
  if (absl::Status s = PlanSaveInto(nodes, options, out); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::shared_ptr<const v1::SaveAssignment>> PlanSaveShared(
    absl::Span<const v1::NodeSavePlan> nodes, const SavePlannerOptions& options) {
  std::shared_ptr<v1::SaveAssignment> out = NewOnPlanArena<v1::SaveAssignment>();
  if (absl::Status s = PlanSaveInto(nodes, options, *out); !s.ok()) return s;
  return out;
}

uint64_t AssignmentBytes(const v1::SaveAssignment& assignment) {
  const google::protobuf::Arena* arena = assignment.GetArena();
  return arena != nullptr ? arena->SpaceAllocated() : assignment.SpaceUsedLong();
}

}  // namespace ckpt::coordinator
