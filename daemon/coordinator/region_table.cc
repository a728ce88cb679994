#include "daemon/coordinator/region_table.h"

#include "absl/hash/hash.h"

namespace ckpt::coordinator {

RegionTable::View RegionTable::ViewOf(uint32_t id) const {
  const absl::Span<const int64_t> all =
      absl::MakeConstSpan(fields_).subspan(start_[id], start_[id + 1] - start_[id]);
  return View{tensor_[id], kind_[id], all.subspan(0, first_size_[id]),
              all.subspan(first_size_[id])};
}

size_t RegionTable::Hash::operator()(const View& v) const {
  return absl::HashOf(v.tensor, v.kind, v.first, v.second);
}

bool RegionTable::Eq::Same(const View& a, const View& b) {
  return a.tensor == b.tensor && a.kind == b.kind && a.first == b.first && a.second == b.second;
}

std::pair<uint32_t, bool> RegionTable::Intern(int tensor, const v1::Region& region) {
  View view{tensor, static_cast<int>(region.kind_case()), {}, {}};
  int64_t flat[2];
  if (region.has_box()) {
    view.first = absl::MakeConstSpan(region.box().offsets());
    view.second = absl::MakeConstSpan(region.box().lengths());
  } else if (region.has_flat()) {
    flat[0] = region.flat().begin();
    flat[1] = region.flat().end();
    view.first = absl::MakeConstSpan(flat, 2);
  }
  auto found = ids_.find(view);
  if (found != ids_.end()) return {*found, false};
  const uint32_t id = static_cast<uint32_t>(tensor_.size());
  fields_.insert(fields_.end(), view.first.begin(), view.first.end());
  fields_.insert(fields_.end(), view.second.begin(), view.second.end());
  start_.push_back(fields_.size());
  first_size_.push_back(static_cast<uint32_t>(view.first.size()));
  tensor_.push_back(tensor);
  kind_.push_back(view.kind);
  ids_.insert(id);
  return {id, true};
}

}  // namespace ckpt::coordinator
