// The region table: one dense id per distinct (tensor, region as written),
// whatever the requests' own messages are.
#include "daemon/planning/region_table.h"

#include <vector>

#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::planning {
namespace {

using namespace testing;  // NOLINT

v1::Region Box(std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
  v1::Region r;
  r.mutable_box();
  for (int64_t o : offsets) r.mutable_box()->add_offsets(o);
  for (int64_t l : lengths) r.mutable_box()->add_lengths(l);
  return r;
}

v1::Region Flat(int64_t begin, int64_t end) {
  v1::Region r;
  r.mutable_flat()->set_begin(begin);
  r.mutable_flat()->set_end(end);
  return r;
}

TEST_CASE("regions written alike share an id; anything else is a new one", "[region_table]") {
  RegionTable table;
  CHECK(table.Intern(0, Box({0, 0}, {4, 4})) == std::pair<uint32_t, bool>{0, true});
  // Another message with the same fields.
  CHECK(table.Intern(0, Box({0, 0}, {4, 4})) == std::pair<uint32_t, bool>{0, false});
  // Another tensor, another box, the fields split differently between
  // offsets and lengths, a flat range with the same numbers, the whole
  // tensor (no fields at all), an empty box.
  CHECK(table.Intern(1, Box({0, 0}, {4, 4})) == std::pair<uint32_t, bool>{1, true});
  CHECK(table.Intern(0, Box({4, 0}, {4, 4})) == std::pair<uint32_t, bool>{2, true});
  CHECK(table.Intern(0, Box({0, 0, 4}, {4})) == std::pair<uint32_t, bool>{3, true});
  CHECK(table.Intern(0, Flat(0, 0)) == std::pair<uint32_t, bool>{4, true});
  CHECK(table.Intern(0, v1::Region{}) == std::pair<uint32_t, bool>{5, true});
  CHECK(table.Intern(0, Box({}, {})) == std::pair<uint32_t, bool>{6, true});
  CHECK(table.size() == 7);
  // All still found after the table grew.
  for (int round = 0; round < 2; ++round) {
    for (int64_t k = 0; k < 10000; ++k) {
      CHECK(table.Intern(2, Flat(k, k + 1)) ==
            std::pair<uint32_t, bool>{static_cast<uint32_t>(7 + k), round == 0});
    }
  }
  CHECK(table.Intern(0, Flat(0, 0)) == std::pair<uint32_t, bool>{4, false});
  CHECK(table.Intern(0, v1::Region{}) == std::pair<uint32_t, bool>{5, false});
  CHECK(table.Intern(0, Box({}, {})) == std::pair<uint32_t, bool>{6, false});
}

}  // namespace
}  // namespace ckpt::planning
