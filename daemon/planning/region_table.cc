#include "daemon/planning/region_table.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace ckpt::planning {

RegionTable::View RegionTable::ViewOf(uint32_t id) const {
  const Entry& e = entries_[id];
  const absl::Span<const int64_t> all =
      e.size <= kInline ? absl::MakeConstSpan(e.fields, e.size)
                        : absl::MakeConstSpan(spilled_).subspan(e.spilled_at, e.size);
  return View{e.tensor, e.kind, all.subspan(0, e.first_size), all.subspan(e.first_size)};
}

size_t RegionTable::HashOf(const View& v) {
  return absl::HashOf(v.tensor, v.kind, v.first, v.second);
}

bool RegionTable::Eq::Same(const View& a, const View& b) {
  return a.tensor == b.tensor && a.kind == b.kind && a.first == b.first && a.second == b.second;
}

namespace {

// The View's fields: a box's own arrays, a flat range's two ends copied
// into `flat`.
void FillView(const v1::Region& region, absl::Span<const int64_t>& first,
              absl::Span<const int64_t>& second, int64_t (&flat)[2]) {
  if (region.has_box()) {
    first = absl::MakeConstSpan(region.box().offsets());
    second = absl::MakeConstSpan(region.box().lengths());
  } else if (region.has_flat()) {
    flat[0] = region.flat().begin();
    flat[1] = region.flat().end();
    first = absl::MakeConstSpan(flat, 2);
  }
}

}  // namespace

void RegionTable::Prefetch(int tensor, const v1::Region& region, int max_dims) const {
  if (region.has_box() &&
      (region.box().offsets_size() > max_dims || region.box().lengths_size() > max_dims)) {
    return;
  }
  View view{tensor, static_cast<int>(region.kind_case()), {}, {}};
  int64_t flat[2];
  FillView(region, view.first, view.second, flat);
  ids_.prefetch(view);
}

std::pair<uint32_t, bool> RegionTable::Intern(int tensor, const v1::Region& region) {
  View view{tensor, static_cast<int>(region.kind_case()), {}, {}};
  int64_t flat[2];
  FillView(region, view.first, view.second, flat);
  const size_t hash = HashOf(view);
  auto found = ids_.find(view, hash);
  if (found != ids_.end()) return {found->id, false};
  const uint32_t id = static_cast<uint32_t>(entries_.size());
  Entry& e = entries_.emplace_back();
  e.tensor = tensor;
  e.kind = view.kind;
  e.first_size = static_cast<uint32_t>(view.first.size());
  e.size = static_cast<uint32_t>(view.first.size() + view.second.size());
  int64_t* to = e.fields;
  if (e.size > kInline) {
    e.spilled_at = spilled_.size();
    spilled_.resize(spilled_.size() + e.size);
    to = spilled_.data() + e.spilled_at;
  }
  std::copy(view.first.begin(), view.first.end(), to);
  std::copy(view.second.begin(), view.second.end(), to + view.first.size());
  ids_.insert(Slot{hash, id});
  return {id, true};
}

}  // namespace ckpt::planning
