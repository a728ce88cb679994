#include "daemon/planning/save_batches.h"

#include <algorithm>

#include "proto/lib/align.h"

namespace ckpt::planning {

BatchLayout NextBatchLayout(absl::Span<const v1::SaveItem> items, BatchCursor& cursor,
                            uint64_t chunk_bytes, uint64_t batch_bytes, uint64_t alignment) {
  BatchLayout layout;
  chunk_bytes = std::max<uint64_t>(chunk_bytes, 1);
  batch_bytes = std::max(batch_bytes / chunk_bytes, uint64_t{1}) * chunk_bytes;
  uint64_t payload = 0;
  while (cursor.item < items.size()) {
    const v1::SaveItem& item = items[cursor.item];
    if (cursor.offset >= item.bytes()) {
      ++cursor.item;
      cursor.offset = 0;
      continue;
    }
    const uint64_t left = item.bytes() - cursor.offset;
    uint64_t take = 0;
    if (item.kind() == v1::SaveItem::OBJECT) {
      if (payload > 0 && left > batch_bytes - payload) break;  // alone, next batch
      take = left;
    } else {
      const uint64_t room =
          (batch_bytes - std::min(payload, batch_bytes)) / chunk_bytes * chunk_bytes;
      if (room == 0) break;
      take = std::min(left, room);
    }
    layout.slices.push_back({cursor.item, cursor.offset, take, layout.room_bytes});
    layout.room_bytes += AlignUp(take, alignment);
    payload += take;
    cursor.offset += take;
    if (payload >= batch_bytes) break;
  }
  // Past the last item (or only zero-byte items left): nothing follows.
  while (cursor.item < items.size() && cursor.offset >= items[cursor.item].bytes()) {
    ++cursor.item;
    cursor.offset = 0;
  }
  layout.last = cursor.item >= items.size();
  return layout;
}

}  // namespace ckpt::planning
