// How a rank's assigned items stream through the pool: the daemon cuts them
// into batches of whole chunks and decides where each slice lies in the
// batch's room (docs/design.md §4: the daemon decides the layout, the client only
// copies). Pure functions, so the layout is tested apart from the sessions.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_PLANNING_SAVE_BATCHES_H_
#define CKPT_DAEMON_PLANNING_SAVE_BATCHES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "ckpt/v1/node.pb.h"

namespace ckpt::planning {

// Where the next batch starts: an item and a byte offset inside it.
struct BatchCursor {
  size_t item = 0;
  uint64_t offset = 0;
};

struct BatchSliceLayout {
  size_t item = 0;           // index into the rank's items
  uint64_t item_offset = 0;  // a multiple of chunk_bytes
  uint64_t length = 0;
  uint64_t room_offset = 0;  // aligned, from the start of the batch's room
};

struct BatchLayout {
  std::vector<BatchSliceLayout> slices;
  uint64_t room_bytes = 0;  // what to allocate: slices aligned and packed
  bool last = false;        // the cursor reached the end of the items
};

// The next batch from `cursor`, which it advances: whole chunks up to
// batch_bytes (at least one chunk), an item's last slice may be shorter.
// An object is one stored chunk, so it goes whole, in a batch of its own
// when it does not fit beside others. Items of zero bytes are skipped:
// nothing of them is copied or written.
BatchLayout NextBatchLayout(absl::Span<const v1::SaveItem> items, BatchCursor& cursor,
                            uint64_t chunk_bytes, uint64_t batch_bytes, uint64_t alignment);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_SAVE_BATCHES_H_
