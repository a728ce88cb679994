#include "daemon/planning/save_planner.h"

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
#include "absl/functional/function_ref.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_footprint.h"
#include "daemon/planning/parallel_for.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/planner_memory.h"
#include "daemon/planning/rank_form.h"
#include "daemon/planning/region_table.h"
#include "proto/lib/align.h"
#include "proto/lib/compact_plan.h"
#include "proto/lib/dtype.h"
#include "proto/lib/geometry.h"
#include "proto/lib/region_convert.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt::planning {
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
  int like = -1;           // tensors of one dtype and shape share this number
  bool validated = false;  // a shard of it was, in full
  int first_rank = 0;
  int64_t elements = -1;
  int64_t covered = 0;  // elements of its distinct regions
};

// One way a region of a tensor was written down (a box, a flat range, the
// whole tensor), as first sent in plan order. Replicas are nearly always
// spelled alike; two spellings of the same elements (a box and a flat
// range) are one region.
struct Spelling {
  int tensor = 0;
  const v1::Region* written = nullptr;  // as its first holder's host listed it
  int first_rank = 0;                   // that holder's rank
  std::pair<int64_t, int64_t> span;     // flattened [first, end); {0, 0} if empty
  int64_t elements = 0;
  int64_t bytes = 0;
  uint32_t region = 0;  // the spelling that heads its distinct region
};

// Every shard of the plan by its rank's form: the spellings of its shards
// in order. Data-parallel replicas share one form, so what is worked out
// per form is not repeated per replica (8 million shards at 8192 ranks are
// a million forms' entries).
struct Shards {
  std::vector<TensorInfo> tensors;
  std::vector<Spelling> spellings;
  RankForms forms;                       // their entries lie as form_spellings' do
  std::vector<uint32_t> form_spellings;  // each form's, in shard order
  std::vector<uint32_t> form_of_rank;    // by rank in plan order; forms in order of first use

  // Where form f's spellings start in form_spellings (forms.size() + 1
  // bounds; fewer than 2^32 entries, CollectShards checks).
  uint32_t first(size_t f) const { return static_cast<uint32_t>(forms.first(f)); }
  absl::Span<const uint32_t> Form(size_t f) const {
    return absl::MakeConstSpan(form_spellings).subspan(first(f), first(f + 1) - first(f));
  }
};

// A unique thing to write: one distinct region of a tensor, or one object.
struct UniqueItem {
  bool is_object = false;
  int tensor = -1;                         // of a shard
  const v1::Region* written = nullptr;     // its region, as its first holder's host listed it
  const v1::ObjectDesc* object = nullptr;  // or the object's
  int object_rank = -1;                    // -1 for a global object
  int64_t bytes = 0;
  uint32_t name_order = 0;  // rank of its fqn or key among all names
  // Assignment.
  Holder writer;
  int writer_thread = 0;
  uint64_t file_offset = 0;
};

// The items and their holders. A shard item is held by every rank of
// every form that lists it, at the same index in each; an object's holders
// are listed one by one.
struct Items {
  std::vector<UniqueItem> items;
  // Per item, the forms that list it and where (none for an object).
  struct Use {
    uint32_t form = 0;
    uint32_t index = 0;
  };
  std::vector<uint32_t> first_use;  // items.size() + 1 bounds into uses
  std::vector<Use> uses;
  // Per form, its ranks.
  struct HostRank {
    int host = 0;
    int rank = 0;
  };
  std::vector<uint32_t> first_rank;  // forms + 1 bounds into form_ranks
  std::vector<HostRank> form_ranks;
  // Per item, an object's holders (none for a shard).
  std::vector<uint32_t> first_holder;  // items.size() + 1 bounds into holders
  std::vector<Holder> holders;

  // Calls f(holder) for each holder of the item.
  template <typename F>
  void ForEachHolder(size_t item, F&& f) const {
    for (uint32_t u = first_use[item]; u < first_use[item + 1]; ++u) {
      for (uint32_t r = first_rank[uses[u].form]; r < first_rank[uses[u].form + 1]; ++r) {
        f(Holder{form_ranks[r].host, form_ranks[r].rank, uses[u].index});
      }
    }
    for (uint32_t k = first_holder[item]; k < first_holder[item + 1]; ++k) f(holders[k]);
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

// A plan spelled out, compacted (coordinator.proto): the planner reads the
// compact form only. Hosts already compact are not copied.
absl::Status CompactAll(absl::Span<const v1::NodeSavePlan>& nodes, const RequestLimits& limits,
                        std::vector<v1::NodeSavePlan>& compacted) {
  if (std::all_of(nodes.begin(), nodes.end(),
                  [](const v1::NodeSavePlan& node) { return node.compact(); })) {
    return absl::OkStatus();
  }
  compacted.assign(nodes.begin(), nodes.end());
  for (v1::NodeSavePlan& node : compacted) {
    if (absl::Status s = CompactSavePlan(node, limits); !s.ok()) return s;
  }
  nodes = compacted;
  return absl::OkStatus();
}

// A host's compact tables, checked against what they index and mapped, on
// first use, to the plan's tensors and regions.
struct HostTables {
  std::vector<int> tensor;      // by the host's tensor index; -1: not yet used
  std::vector<int64_t> region;  // by the host's region index; -1: not yet used
};

// Finds each shard's tensor and spelling (a tensor and a region as it was
// written down). Each host's tensors and regions are looked up once, where
// a rank first uses them: a tensor's dtype and shape are compared with
// what earlier hosts said of it (ranks must agree: replicas and coverage
// only mean something within one tensor's index space). A tensor's first
// shard is validated in full; a spelling's geometry is worked out once per
// (dtype and shape, region), then shared by the tensors alike (the layers
// of a model). A rank whose shards are an earlier rank's, tensor for
// tensor and region for region (a data-parallel replica), takes that
// rank's spellings; only the others' shards are looked up one by one.
absl::StatusOr<Shards> CollectShards(absl::Span<const v1::NodeSavePlan> nodes,
                                     const RequestLimits& limits) {
  Shards out;
  absl::flat_hash_map<absl::string_view, int> tensor_by_fqn;
  RegionTable regions;                       // the plan's regions, whatever their tensor (0)
  std::vector<const v1::Region*> region_of;  // by the plan's region id
  // Numbers for (dtype, shape), and geometries by (that number, region).
  std::map<std::pair<v1::DType, std::vector<int64_t>>, int> likes;
  struct Geometry {
    std::pair<int64_t, int64_t> span;
    int64_t elements = 0;
    int64_t bytes = 0;
  };
  absl::flat_hash_map<uint64_t, Geometry> geometries;
  // Spellings by region, then tensor: a rank's shards are mostly of one
  // region, so its lookups stay in one small table (one table of all pairs
  // missed the cache on nearly every lookup at a million spellings).
  std::vector<absl::flat_hash_map<uint32_t, uint32_t>> spelling_by_region;
  std::vector<uint64_t> pairs;  // this rank's
  v1::TensorShard scratch;      // a spelling to validate
  HostTables host;
  for (const v1::NodeSavePlan& node : nodes) {
    if (absl::Status s = CheckCompactTables(node, limits); !s.ok()) return s;
    host.tensor.assign(node.tensors_size(), -1);
    host.region.assign(node.regions_size(), -1);
    for (const v1::RankSavePlan& rank : node.ranks()) {
      const auto who = [&] { return absl::StrCat("rank ", rank.rank()); };
      const int count = rank.shard_tensors_size();
      if (count > limits.max_tensors_per_plan) {
        return absl::ResourceExhaustedError(
            absl::StrCat(who(), ": plan has ", count, " tensors; the limit is ",
                         limits.max_tensors_per_plan, " (--max_tensors_per_plan)"));
      }
      if (rank.objects_size() > limits.max_objects_per_plan) {
        return absl::ResourceExhaustedError(
            absl::StrCat(who(), ": plan has ", rank.objects_size(), " objects; the limit is ",
                         limits.max_objects_per_plan, " (--max_objects_per_plan)"));
      }
      if (rank.shard_regions_size() != count || rank.shards_size() > 0) {
        return Invalid(absl::StrCat(who(), " on host ", node.host().host(), ": ", count,
                                    " shard tensors, ", rank.shard_regions_size(),
                                    " shard regions and ", rank.shards_size(),
                                    " shards spelled out in a compact plan"));
      }
      pairs.clear();
      for (int i = 0; i < count; ++i) {
        const uint32_t k = rank.shard_tensors(i);
        const uint32_t j = rank.shard_regions(i);
        if (k >= host.tensor.size() || j >= host.region.size()) {
          return Invalid(absl::StrCat(who(), ": shard ", i, " names tensor ", k, " and region ", j,
                                      " of ", host.tensor.size(), " and ", host.region.size(),
                                      " its host listed"));
        }
        if (host.tensor[k] < 0) {
          const v1::TensorDesc& desc = node.tensors(static_cast<int>(k));
          if (desc.global_shape_size() > limits.max_dims) {
            scratch.Clear();
            *scratch.mutable_global_shape() = desc.global_shape();
            scratch.set_fqn(desc.fqn());
            return WithContext(ValidateShardRequest(scratch, limits).status(), who());
          }
          auto [found, fresh] =
              tensor_by_fqn.try_emplace(desc.fqn(), static_cast<int>(out.tensors.size()));
          if (fresh) {
            TensorInfo& info = out.tensors.emplace_back();
            info.fqn = desc.fqn();
            info.dtype = desc.dtype();
            info.shape = ShapeFromProto(desc.global_shape());
            info.first_rank = rank.rank();
          }
          const TensorInfo& info = out.tensors[found->second];
          if (info.dtype != desc.dtype() ||
              !std::equal(info.shape.begin(), info.shape.end(), desc.global_shape().begin(),
                          desc.global_shape().end())) {
            return Invalid(absl::StrCat("tensor ", desc.fqn(), ": rank ", rank.rank(),
                                        " has dtype ", DTypeName(desc.dtype()), " shape ",
                                        ShapeString(ShapeFromProto(desc.global_shape())),
                                        " but rank ", info.first_rank, " has dtype ",
                                        DTypeName(info.dtype), " shape ", ShapeString(info.shape)));
          }
          host.tensor[k] = found->second;
        }
        if (host.region[j] < 0) {
          const v1::Region& region = node.regions(static_cast<int>(j));
          const v1::Box& box = region.box();
          if (box.offsets_size() > limits.max_dims || box.lengths_size() > limits.max_dims) {
            scratch.Clear();
            scratch.set_fqn(node.tensors(static_cast<int>(k)).fqn());
            *scratch.mutable_region() = region;
            return WithContext(ValidateShardRequest(scratch, limits).status(), who());
          }
          const auto [id, fresh] = regions.Intern(0, region);
          if (fresh) {
            region_of.push_back(&region);
            spelling_by_region.emplace_back();
          }
          host.region[j] = id;
        }
        pairs.push_back(FormPair(host.tensor[k], static_cast<uint32_t>(host.region[j])));
      }
      // A replica of an earlier rank takes its form.
      const auto [form, fresh_form] = out.forms.Intern(pairs);
      out.form_of_rank.push_back(form);
      if (!fresh_form) continue;
      if (out.forms.entries() > UINT32_MAX) {
        return absl::ResourceExhaustedError("the plan's ranks list more than 2^32 distinct shards");
      }
      for (const uint64_t pair : pairs) {
        const int t = TensorOfPair(pair);
        const uint32_t region = RegionOfPair(pair);
        const auto [found, fresh] = spelling_by_region[region].try_emplace(
            static_cast<uint32_t>(t), static_cast<uint32_t>(out.spellings.size()));
        out.form_spellings.push_back(found->second);
        if (!fresh) continue;
        TensorInfo& info = out.tensors[t];
        Spelling& spelling = out.spellings.emplace_back();
        spelling.tensor = t;
        spelling.written = region_of[region];
        spelling.first_rank = rank.rank();
        if (info.like < 0) {
          info.like =
              likes
                  .try_emplace(std::make_pair(info.dtype, std::vector<int64_t>(info.shape.begin(),
                                                                               info.shape.end())),
                               static_cast<int>(likes.size()))
                  .first->second;
        }
        // A tensor's first shard is validated in full (its name); a region
        // of tensors alike has the same geometry.
        const uint64_t key = static_cast<uint64_t>(info.like) << 32 | region;
        auto known_geometry = geometries.find(key);
        if (known_geometry == geometries.end() || !info.validated) {
          scratch.Clear();
          scratch.set_fqn(std::string(info.fqn));
          scratch.set_dtype(info.dtype);
          for (int64_t d : info.shape) scratch.add_global_shape(d);
          *scratch.mutable_region() = *spelling.written;
          absl::StatusOr<ShardGeometry> g = ValidateShardRequestGeometry(scratch, limits);
          if (!g.ok()) return WithContext(g.status(), who());
          info.validated = true;
          if (known_geometry == geometries.end()) {
            known_geometry = geometries
                                 .emplace(key, Geometry{*geo::RegionSpan(g->shape, g->region),
                                                        g->elements, g->bytes})
                                 .first;
          }
        }
        if (info.elements < 0) info.elements = *geo::NumElements(info.shape);  // valid now
        spelling.span = known_geometry->second.span;
        spelling.elements = known_geometry->second.elements;
        spelling.bytes = known_geometry->second.bytes;
      }
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
      return RegionFromProto(*spellings[k].written).DebugString();
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
        const geo::Region region = RegionFromProto(*s.written);
        for (uint32_t a : active) {
          absl::StatusOr<int64_t> common =
              geo::CommonElements(info.shape, RegionFromProto(*spellings[a].written), region);
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

// Bounds of a CSR layout: counts[k] at [k + 1], summed.
void CountsToBounds(std::vector<uint32_t>& bounds) {
  std::partial_sum(bounds.begin(), bounds.end(), bounds.begin());
}

// The things to write, in plan order: a distinct region becomes an item at
// its first holder, objects where they are listed (a global object once,
// whoever lists it). Plan order makes the assignment deterministic. A form
// (and so a rank) that lists one region twice (in any spelling) is refused.
absl::StatusOr<Items> CollectItems(absl::Span<const v1::NodeSavePlan> nodes, const Shards& shards,
                                   const RequestLimits& limits) {
  Items out;
  std::vector<UniqueItem>& items = out.items;
  std::vector<uint32_t> item_of_entry(shards.form_spellings.size());  // by form entry
  std::vector<std::pair<uint32_t, Holder>> object_holders;
  std::vector<int32_t> item_of_region(shards.spellings.size(), -1);  // by head spelling
  std::vector<int32_t> last_form(shards.spellings.size(), -1);       // by head spelling
  absl::flat_hash_map<absl::string_view, uint32_t> global_objects;
  out.first_rank.assign(shards.forms.size() + 1, 0);
  size_t plan_rank = 0;
  uint32_t forms_seen = 0;
  for (int h = 0; h < static_cast<int>(nodes.size()); ++h) {
    for (const v1::RankSavePlan& rank : nodes[h].ranks()) {
      const uint32_t form = shards.form_of_rank[plan_rank++];
      ++out.first_rank[form + 1];
      // Forms are numbered in order of first use: this rank is the form's
      // first, and its new regions become items here.
      for (; forms_seen <= form; ++forms_seen) {
        const absl::Span<const uint32_t> spellings = shards.Form(forms_seen);
        for (size_t i = 0; i < spellings.size(); ++i) {
          const Spelling& spelling = shards.spellings[spellings[i]];
          const uint32_t region = spelling.region;
          if (last_form[region] == static_cast<int32_t>(forms_seen)) {
            return Invalid(absl::StrCat(
                "rank ", rank.rank(), " lists tensor ", shards.tensors[spelling.tensor].fqn,
                " region ", RegionFromProto(*spelling.written).DebugString(), " twice"));
          }
          last_form[region] = static_cast<int32_t>(forms_seen);
          if (item_of_region[region] < 0) {
            const Spelling& head = shards.spellings[region];
            item_of_region[region] = static_cast<int32_t>(items.size());
            UniqueItem& item = items.emplace_back();
            item.tensor = head.tensor;
            item.written = head.written;
            item.bytes = head.bytes;
          }
          item_of_entry[shards.first(forms_seen) + i] =
              static_cast<uint32_t>(item_of_region[region]);
        }
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
  // Each item's uses (form and index), each form's ranks, each object's
  // holders: counted, then placed.
  out.first_use.assign(items.size() + 1, 0);
  for (uint32_t item : item_of_entry) ++out.first_use[item + 1];
  CountsToBounds(out.first_use);
  out.uses.resize(out.first_use.back());
  {
    std::vector<uint32_t> next(out.first_use.begin(), out.first_use.end() - 1);
    for (uint32_t f = 0; f < shards.forms.size(); ++f) {
      for (uint32_t e = shards.first(f); e < shards.first(f + 1); ++e) {
        out.uses[next[item_of_entry[e]]++] = {f, e - shards.first(f)};
      }
    }
  }
  CountsToBounds(out.first_rank);
  out.form_ranks.resize(out.first_rank.back());
  {
    std::vector<uint32_t> next(out.first_rank.begin(), out.first_rank.end() - 1);
    plan_rank = 0;
    for (int h = 0; h < static_cast<int>(nodes.size()); ++h) {
      for (const v1::RankSavePlan& rank : nodes[h].ranks()) {
        out.form_ranks[next[shards.form_of_rank[plan_rank++]]++] = {h, rank.rank()};
      }
    }
  }
  out.first_holder.assign(items.size() + 1, 0);
  for (const auto& [item, holder] : object_holders) ++out.first_holder[item + 1];
  CountsToBounds(out.first_holder);
  out.holders.resize(out.first_holder.back());
  {
    std::vector<uint32_t> next(out.first_holder.begin(), out.first_holder.end() - 1);
    for (const auto& [item, holder] : object_holders) out.holders[next[item]++] = holder;
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

// Worst-fit, largest first (docs/design.md §4.2): each item to the least-loaded
// host among its holders, then that host's least-loaded rank, then its
// least-loaded writer file, at the file's next aligned offset. Largest
// first keeps the loads within about one item of each other. Items held on
// one host only go first: they have no choice of host, and replicas placed
// before them could not even out what they add (a replica of every rank
// would land on the first host, which then also writes its own shards).
// Sets each item's writer and offset; returns the items in assignment order.
std::vector<uint32_t> AssignWriters(absl::Span<const v1::NodeSavePlan> nodes, Items& all,
                                    uint64_t alignment, int threads) {
  std::vector<UniqueItem>& items = all.items;
  // Items on one host first, then the largest, then in name order; ties
  // in plan order: the index is the last key. Sorted on two plain words
  // next to each other, not through the items (millions at cluster scale):
  // the first word is 0 for an item on one host, then its bytes from the
  // largest down (items are at most 2^40 bytes by default: larger ones
  // under larger --max_shard_bytes tie); the second, its name order then
  // its index.
  // The keys are distinct (the index is in them): ranges made and sorted
  // on threads of their own (parallel_for.h), then merged, give the one
  // order a single sort gives.
  constexpr uint64_t kOnManyHosts = uint64_t{1} << 62;
  std::vector<std::pair<uint64_t, uint64_t>> keys(items.size());
  std::vector<size_t> run_end(static_cast<size_t>(std::max(1, threads)), 0);
  const size_t runs = ParallelFor(
      items.size(), threads, items.size(), kMinWorkPerRange,
      [&](size_t range, size_t begin, size_t end) {
        for (size_t k = begin; k < end; ++k) {
          const uint32_t i = static_cast<uint32_t>(k);
          int host = -1;
          bool one_host = true;
          all.ForEachHolder(i, [&](const Holder& holder) {
            if (host >= 0 && holder.host != host) one_host = false;
            host = holder.host;
          });
          const uint64_t bytes = std::min(static_cast<uint64_t>(items[i].bytes), kOnManyHosts - 1);
          keys[i] = {(one_host ? 0 : kOnManyHosts) + (kOnManyHosts - 1 - bytes),
                     uint64_t{items[i].name_order} << 32 | i};
        }
        std::sort(keys.begin() + static_cast<ptrdiff_t>(begin),
                  keys.begin() + static_cast<ptrdiff_t>(end));
        run_end[range] = end;
      });
  // Sorted runs merged pairwise, a level at a time.
  run_end.resize(runs);
  while (run_end.size() > 1) {
    std::vector<size_t> merged;
    for (size_t r = 0; r < run_end.size(); r += 2) {
      if (r + 1 < run_end.size()) {
        const size_t begin = r == 0 ? 0 : run_end[r - 1];
        std::inplace_merge(keys.begin() + static_cast<ptrdiff_t>(begin),
                           keys.begin() + static_cast<ptrdiff_t>(run_end[r]),
                           keys.begin() + static_cast<ptrdiff_t>(run_end[r + 1]));
        merged.push_back(run_end[r + 1]);
      } else {
        merged.push_back(run_end[r]);
      }
    }
    run_end = std::move(merged);
  }
  std::vector<uint32_t> order(keys.size());
  for (uint32_t k = 0; k < keys.size(); ++k) order[k] = static_cast<uint32_t>(keys[k].second);
  std::vector<uint64_t> host_load(nodes.size(), 0);
  std::vector<uint64_t> rank_load(nodes.front().world_size(), 0);
  std::vector<std::vector<uint64_t>> writer_load(nodes.size());  // aligned bytes = next offset
  for (size_t h = 0; h < nodes.size(); ++h) writer_load[h].assign(nodes[h].writer_threads(), 0);
  for (uint32_t i : order) {
    UniqueItem& item = items[i];
    Holder best{-1, -1, 0};
    all.ForEachHolder(i, [&](const Holder& holder) {
      if (best.host < 0 || std::tie(host_load[holder.host], rank_load[holder.rank], holder.rank) <
                               std::tie(host_load[best.host], rank_load[best.rank], best.rank)) {
        best = holder;
      }
    });
    item.writer = best;
    std::vector<uint64_t>& writers = writer_load[best.host];
    item.writer_thread =
        static_cast<int>(std::min_element(writers.begin(), writers.end()) - writers.begin());
    item.file_offset = writers[item.writer_thread];
    const uint64_t padded = AlignUp(static_cast<uint64_t>(item.bytes), alignment);
    writers[item.writer_thread] += padded;
    host_load[best.host] += padded;
    rank_load[best.rank] += padded;
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

// A manifest of `bytes` is within what the catalog reads: its bytes, and
// its footprint while read (manifest_footprint.h), measured on `wire()`
// unless even the costliest bytes could not reach the bound.
absl::Status CheckManifestBytes(uint64_t bytes, absl::FunctionRef<std::string()> wire,
                                const ManifestLimits& limits) {
  if (bytes > limits.max_manifest_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the save needs a manifest of about ", bytes, " bytes; the limit is ",
                     limits.max_manifest_bytes, " (--max_manifest_bytes)"));
  }
  if (bytes > limits.max_memory_bytes / kMaxFootprintPerWireByte) {
    absl::StatusOr<ManifestFootprint> footprint = MeasureManifest(wire(), "the plan's manifest");
    if (!footprint.ok()) return footprint.status();
    if (absl::Status s = CheckManifestFootprint(*footprint, bytes, "the plan's manifest", limits);
        !s.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the save would commit a checkpoint that cannot be loaded: ", s.message()));
    }
  }
  return absl::OkStatus();
}

// The longest chunk of a tensor shard: the plan's chunk size, or less if
// every shard is shorter.
uint64_t LongestChunk(const std::vector<UniqueItem>& items, const SavePlannerOptions& options) {
  uint64_t longest = 0;
  for (const UniqueItem& item : items) {
    if (!item.is_object) longest = std::max(longest, static_cast<uint64_t>(item.bytes));
  }
  return std::min(longest, options.chunk_bytes);
}

// Whatever the ranks sent, the checkpoint must load: tensors, shards or
// chunks of all ranks together past the manifest's bounds, several hosts'
// metadata merged past them, or a manifest too large to read back would
// otherwise commit a step that every load refuses. `chunks` as counted by
// CountChunks: each chunk's CRC (up to 6 bytes with its tag) is filled in
// at commit. The manifest is checked as planned (planned_manifest.h):
// `listed_wire_bytes` bounds what listing its shards (the template lists
// layouts) and their chunks adds to the template's size.
absl::Status CheckLoadable(const v1::SaveAssignment& plan, uint64_t chunks,
                           uint64_t listed_wire_bytes, uint64_t longest_chunk,
                           const SavePlannerOptions& options) {
  const v1::CheckpointManifest& manifest = plan.manifest_template();
  const int64_t shard_chunks = static_cast<int64_t>(chunks) - manifest.objects_size();
  if (absl::Status s =
          ValidatePlannedManifest(plan, shard_chunks, longest_chunk, "the plan's manifest",
                                  options.manifest_limits, PlanningThreads(options.threads));
      !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the save would commit a checkpoint that cannot be loaded: ", s.message()));
  }
  // The shards' and tensors' length prefixes grow with their chunks, by at
  // most 4 bytes each (5-byte varints): near a limit, the manifest's size
  // is counted exactly, and its bytes made (not its message) if they must
  // be measured.
  const uint64_t bytes = manifest.ByteSizeLong() + listed_wire_bytes + 6 * chunks;
  const uint64_t slack = 4 * (static_cast<uint64_t>(plan.shard_hosts_size()) +
                              static_cast<uint64_t>(manifest.tensors_size()));
  const ManifestLimits& limits = options.manifest_limits;
  if (bytes + slack <= limits.max_manifest_bytes &&
      bytes + slack <= limits.max_memory_bytes / kMaxFootprintPerWireByte) {
    return absl::OkStatus();
  }
  return CheckManifestBytes(
      PlannedManifestBytes(plan) + 6 * chunks, [&] { return SerializedManifestOf(plan); }, limits);
}

// The template's tensors list no shards: each names one of its layouts
// (shard_layouts, 1-based), its shards' regions in order, as a compact
// root does (compact_root.h); ManifestOf lists them. A model's tensors are
// stored alike, so a cluster's millions of shards are a few layouts: a
// region per shard was most of a cached plan (3 GB at 131,072 ranks).
// `region_column` holds each shard's region, tensors' shards from
// `first_column`; tensors with the same list have the same `regions_hash`.
// Returns a bound on what listing the shards (each region, writer rank and
// framing; chunks not counted) adds to the manifest's wire size.
uint64_t LayOutShards(const std::vector<uint32_t>& by_name,
                      const std::vector<uint32_t>& first_column,
                      const std::vector<uint32_t>& first_of_tensor,
                      const std::vector<const v1::Region*>& region_column,
                      const std::vector<size_t>& regions_hash,
                      const std::vector<v1::TensorEntry*>& entries,
                      v1::CheckpointManifest& manifest) {
  // A shard's writer rank (a non-negative int32: a tag and up to 5 bytes),
  // its own tag and length prefix (up to 5 bytes before its chunks).
  constexpr uint64_t kShardFieldsBound = 6 + 6;
  struct Layout {
    uint32_t first = 0;  // in region_column
    uint32_t count = 0;
    uint64_t wire_bound = 0;  // of its shards, listed
  };
  std::vector<Layout> layouts;
  absl::flat_hash_map<size_t, std::vector<uint32_t>> alike;  // hash: layouts
  uint64_t wire = 0;
  for (const uint32_t t : by_name) {
    const uint32_t count = first_of_tensor[t + 1] - first_of_tensor[t];
    if (count == 0) continue;  // layout 0: no shards
    const v1::Region* const* regions = region_column.data() + first_column[t];
    std::vector<uint32_t>& candidates = alike[regions_hash[t]];
    uint32_t layout = 0;
    for (const uint32_t l : candidates) {
      if (layouts[l].count == count &&
          std::equal(regions, regions + count, region_column.data() + layouts[l].first)) {
        layout = l + 1;
        break;
      }
    }
    if (layout == 0) {
      Layout made{.first = first_column[t], .count = count};
      v1::ShardLayout& listed = *manifest.add_shard_layouts();
      listed.mutable_regions()->Reserve(static_cast<int>(count));
      for (uint32_t s = 0; s < count; ++s) {
        *listed.add_regions() = *regions[s];
        made.wire_bound += FramedFieldBytes(regions[s]->ByteSizeLong()) + kShardFieldsBound;
      }
      candidates.push_back(static_cast<uint32_t>(layouts.size()));
      layouts.push_back(made);
      layout = static_cast<uint32_t>(layouts.size());
    }
    entries[t]->set_layout(layout);
    wire += layouts[layout - 1].wire_bound;
  }
  return wire;
}

// The assignment, and the manifest the commit will write with every chunk
// placed (planned_manifest.h: each shard's chunks are cut from its item
// when the manifest is made): the commit then only fills in checksums, so
// what is committed is exactly what was planned. Returns a bound on what
// listing the shards and their chunks adds to the template's wire size.
uint64_t BuildAssignment(absl::Span<const v1::NodeSavePlan> nodes, const Shards& shards,
                         const std::vector<UniqueItem>& items, const std::vector<uint32_t>& order,
                         const SavePlannerOptions& options, v1::SaveAssignment& out) {
  const v1::NodeSavePlan& first = nodes.front();
  out.set_chunk_bytes(options.chunk_bytes);
  std::vector<std::vector<std::string>> files(nodes.size());
  for (size_t h = 0; h < nodes.size(); ++h) {
    v1::HostAssignment* host = out.add_hosts();
    *host->mutable_host() = nodes[h].host();
    for (int w = 0; w < nodes[h].writer_threads(); ++w) {
      files[h].push_back(FileName(nodes[h].host().host(), w));
      host->add_files(files[h].back());
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
    // Only what the save left uncovered (a partial save may cover some
    // tensors whole: those export and load like any other).
    entry->set_partial(first.partial() && info.covered != info.elements);
    entries[t] = entry;
  }
  // The items by host and by tensor, each in assignment order: every
  // host's list and every tensor's shards are then made by one thread,
  // several at once (parallel_for.h), as they would be one after the other.
  std::vector<uint32_t> first_of_host(nodes.size() + 1, 0);
  std::vector<uint32_t> first_of_tensor(shards.tensors.size() + 1, 0);
  for (const UniqueItem& item : items) {
    ++first_of_host[item.writer.host + 1];
    if (!item.is_object) ++first_of_tensor[item.tensor + 1];
  }
  CountsToBounds(first_of_host);
  CountsToBounds(first_of_tensor);
  std::vector<uint32_t> by_host(items.size());
  std::vector<uint32_t> in_host(items.size());  // each item's index in its host's list
  std::vector<uint32_t> by_tensor(first_of_tensor.back());
  {
    std::vector<uint32_t> next_host(first_of_host.begin(), first_of_host.end() - 1);
    std::vector<uint32_t> next_tensor(first_of_tensor.begin(), first_of_tensor.end() - 1);
    for (uint32_t i : order) {
      const int32_t h = items[i].writer.host;
      in_host[i] = next_host[h] - first_of_host[h];
      by_host[next_host[h]++] = i;
      if (!items[i].is_object) by_tensor[next_tensor[items[i].tensor]++] = i;
    }
  }
  const auto file_of = [&](const UniqueItem& item) -> const std::string& {
    return files[item.writer.host][item.writer_thread];
  };
  // Each tensor's first shard in the manifest's order (by name), where its
  // shards' columns start.
  std::vector<uint32_t> first_column(shards.tensors.size(), 0);
  {
    uint32_t next = 0;
    for (uint32_t t : by_name) {
      first_column[t] = next;
      next += first_of_tensor[t + 1] - first_of_tensor[t];
    }
  }
  out.mutable_shard_hosts()->Resize(static_cast<int>(first_of_tensor.back()), 0);
  out.mutable_shard_items()->Resize(static_cast<int>(first_of_tensor.back()), 0);
  uint32_t* const shard_hosts = out.mutable_shard_hosts()->mutable_data();
  uint32_t* const shard_items = out.mutable_shard_items()->mutable_data();
  // Ranges of kMinWorkPerRange items or more: a small plan runs on this thread.
  const int threads = PlanningThreads(options.threads);
  std::vector<uint64_t> chunk_wire_bytes(static_cast<size_t>(threads), 0);  // by range
  // Each shard's region, in the columns' order. Regions are interned
  // (CollectShards): equal regions are one pointer, so tensors stored
  // alike have equal lists of pointers.
  std::vector<const v1::Region*> region_column(first_of_tensor.back());
  std::vector<size_t> regions_hash(shards.tensors.size(), 0);
  ParallelFor(
      shards.tensors.size(), threads, items.size(), kMinWorkPerRange,
      [&](size_t range, size_t begin, size_t end) {
        for (size_t t = begin; t < end; ++t) {
          uint32_t column = first_column[t];
          for (uint32_t k = first_of_tensor[t]; k < first_of_tensor[t + 1]; ++k, ++column) {
            const UniqueItem& item = items[by_tensor[k]];
            region_column[column] = item.written;
            shard_hosts[column] = static_cast<uint32_t>(item.writer.host);
            shard_items[column] = in_host[by_tensor[k]];
            chunk_wire_bytes[range] += PlannedChunksWireBytes(
                item.bytes, item.file_offset, file_of(item).size(), options.chunk_bytes);
          }
          regions_hash[t] = absl::HashOf(absl::MakeConstSpan(
              region_column.data() + first_column[t], first_of_tensor[t + 1] - first_of_tensor[t]));
        }
      });
  const uint64_t shards_wire_bytes = LayOutShards(by_name, first_column, first_of_tensor,
                                                  region_column, regions_hash, entries, manifest);
  for (uint32_t i : order) {
    const UniqueItem& item = items[i];
    if (!item.is_object) continue;
    v1::ObjectEntry* object = manifest.add_objects();
    object->set_key(item.object->key());
    object->set_rank(item.object_rank);
    // A 0-byte object's chunk is complete here: nothing is written for it
    // and its crc32c (0, the CRC32C of no bytes) is final.
    v1::StoredChunk* chunk = object->mutable_chunk();
    chunk->set_file(file_of(item));
    chunk->set_file_offset(item.file_offset);
    chunk->set_length(item.bytes);
  }
  ParallelFor(
      nodes.size(), threads, items.size(), kMinWorkPerRange, [&](size_t, size_t begin, size_t end) {
        for (size_t h = begin; h < end; ++h) {
          v1::HostAssignment* host = out.mutable_hosts(static_cast<int>(h));
          host->mutable_items()->Reserve(static_cast<int>(first_of_host[h + 1] - first_of_host[h]));
          for (uint32_t k = first_of_host[h]; k < first_of_host[h + 1]; ++k) {
            const UniqueItem& item = items[by_host[k]];
            v1::WriteItem* write = host->add_items();
            write->set_rank(item.writer.rank);
            write->set_is_object(item.is_object);
            write->set_index(item.writer.index);
            write->set_bytes(item.bytes);
            write->set_writer(item.writer_thread);
            write->set_file_offset(item.file_offset);
          }
        }
      });
  return shards_wire_bytes +
         std::accumulate(chunk_wire_bytes.begin(), chunk_wire_bytes.end(), uint64_t{0});
}

// Plans into `out`, empty: on the heap or on an arena.
absl::Status PlanSaveInto(absl::Span<const v1::NodeSavePlan> nodes,
                          const SavePlannerOptions& options, v1::SaveAssignment& out) {
  if (nodes.empty()) return Invalid("save plan has no hosts");
  if (absl::Status s = ValidateSaveHeader(nodes.front(), options); !s.ok()) return s;
  if (absl::Status s = ValidateHostsAndRanks(nodes); !s.ok()) return s;
  std::vector<v1::NodeSavePlan> compacted;
  if (absl::Status s = CompactAll(nodes, options.limits, compacted); !s.ok()) return s;
  absl::StatusOr<Shards> shards = CollectShards(nodes, options.limits);
  if (!shards.ok()) return shards.status();
  if (absl::Status s = GroupRegions(*shards, nodes.front().partial(), options.limits); !s.ok()) {
    return s;
  }
  absl::StatusOr<Items> items = CollectItems(nodes, *shards, options.limits);
  if (!items.ok()) return items.status();
  absl::StatusOr<uint64_t> chunks = CountChunks(items->items, options);
  if (!chunks.ok()) return chunks.status();
  const std::vector<uint32_t> order =
      AssignWriters(nodes, *items, options.alignment, PlanningThreads(options.threads));
  const uint64_t listed_wire_bytes =
      BuildAssignment(nodes, *shards, items->items, order, options, out);
  return CheckLoadable(out, *chunks, listed_wire_bytes, LongestChunk(items->items, options),
                       options);
}

}  // namespace

absl::Status CheckManifestSize(const v1::CheckpointManifest& manifest, uint64_t extra_bytes,
                               const ManifestLimits& limits) {
  return CheckManifestBytes(
      manifest.ByteSizeLong() + extra_bytes, [&] { return manifest.SerializeAsString(); }, limits);
}

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

}  // namespace ckpt::planning
