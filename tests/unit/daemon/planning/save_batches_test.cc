// NextBatchLayout: how a rank's assigned items stream through the pool.
// Each case runs a cursor to the end and checks every batch against what
// the save session and the writers rely on: every byte of every item in
// exactly one slice, in item order; whole chunks except an item's tail;
// objects whole; slices aligned and packed in their room; no batch above
// batch_bytes unless it is one object that is larger by itself; no batch
// cut short while the next slice would have fit. Then the bytes themselves
// go through the rooms, copied in and written out as the client and the
// writers would, and must arrive intact.
#include "daemon/planning/save_batches.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/catch.h"

namespace ckpt::planning {
namespace {

constexpr uint64_t kKiB = 1024;

v1::SaveItem Item(v1::SaveItem::Kind kind, uint64_t bytes) {
  v1::SaveItem item;
  item.set_kind(kind);
  item.set_bytes(bytes);
  return item;
}
v1::SaveItem Shard(uint64_t bytes) { return Item(v1::SaveItem::SHARD, bytes); }
v1::SaveItem Object(uint64_t bytes) { return Item(v1::SaveItem::OBJECT, bytes); }

// Independent of AlignUp (proto/lib/align.h), which the code under test uses.
uint64_t RoundUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// What NextBatchLayout must treat as the batch size: whole chunks, at
// least one.
uint64_t EffectiveBatch(uint64_t chunk_bytes, uint64_t batch_bytes) {
  return batch_bytes < chunk_bytes ? chunk_bytes : batch_bytes / chunk_bytes * chunk_bytes;
}

std::vector<BatchLayout> AllBatches(const std::vector<v1::SaveItem>& items, uint64_t chunk_bytes,
                                    uint64_t batch_bytes, uint64_t alignment) {
  uint64_t bound = 2;  // an upper bound on the batches needed, so a bug cannot loop forever
  for (const v1::SaveItem& item : items) bound += item.bytes() / chunk_bytes + 1;
  BatchCursor cursor;
  std::vector<BatchLayout> batches;
  for (;;) {
    batches.push_back(NextBatchLayout(items, cursor, chunk_bytes, batch_bytes, alignment));
    if (batches.back().last) break;
    REQUIRE(batches.size() <= bound);
  }
  CHECK(cursor.item == items.size());
  return batches;
}

uint64_t Payload(const BatchLayout& batch) {
  uint64_t payload = 0;
  for (const BatchSliceLayout& slice : batch.slices) payload += slice.length;
  return payload;
}

// The structural checks described at the top of the file.
void CheckBatches(const std::vector<v1::SaveItem>& items, const std::vector<BatchLayout>& batches,
                  uint64_t chunk_bytes, uint64_t batch_bytes, uint64_t alignment) {
  const uint64_t effective = EffectiveBatch(chunk_bytes, batch_bytes);
  REQUIRE_FALSE(batches.empty());
  // The position the next slice must start at: item `at`, byte `offset`.
  size_t at = 0;
  uint64_t offset = 0;
  auto skip_empty = [&] {
    while (at < items.size() && offset == items[at].bytes()) {
      ++at;
      offset = 0;
    }
  };
  skip_empty();
  for (size_t b = 0; b < batches.size(); ++b) {
    const BatchLayout& batch = batches[b];
    INFO("batch " << b << " of " << batches.size());
    CHECK(batch.last == (b + 1 == batches.size()));
    // Only a run with nothing to copy at all has an empty batch.
    if (batch.slices.empty()) {
      CHECK(batches.size() == 1);
      CHECK(at == items.size());
    }
    uint64_t room = 0;
    for (const BatchSliceLayout& slice : batch.slices) {
      INFO("slice of item " << slice.item << " at " << slice.item_offset << ", " << slice.length
                            << " bytes, room offset " << slice.room_offset);
      REQUIRE(at < items.size());
      // In order, contiguous, never a zero-byte item, never past the item.
      REQUIRE(slice.item == at);
      REQUIRE(slice.item_offset == offset);
      REQUIRE(slice.length > 0);
      REQUIRE(slice.length <= items[at].bytes() - offset);
      const bool tail = slice.item_offset + slice.length == items[at].bytes();
      if (items[at].kind() == v1::SaveItem::OBJECT) {
        CHECK(slice.item_offset == 0);  // one stored chunk: never split
        CHECK(tail);
      } else {
        CHECK(slice.item_offset % chunk_bytes == 0);
        CHECK((tail || slice.length % chunk_bytes == 0));
      }
      // Aligned and packed: each slice starts where the previous one's
      // aligned end is, so none overlaps another.
      CHECK(slice.room_offset % alignment == 0);
      CHECK(slice.room_offset == room);
      room += RoundUp(slice.length, alignment);
      offset += slice.length;
      skip_empty();
    }
    CHECK(batch.room_bytes == room);
    const uint64_t payload = Payload(batch);
    const bool one_big_object = batch.slices.size() == 1 &&
                                items[batch.slices[0].item].kind() == v1::SaveItem::OBJECT &&
                                payload > effective;
    CHECK((payload <= effective || one_big_object));
    // Not cut short: the next batch's first slice would not have fit here.
    if (b + 1 < batches.size()) {
      const BatchSliceLayout& next = batches[b + 1].slices.at(0);
      if (items[next.item].kind() == v1::SaveItem::OBJECT) {
        CHECK(payload + next.length > effective);
      } else {
        CHECK(payload + chunk_bytes > effective);
      }
    }
  }
  CHECK(at == items.size());
}

// Pattern byte `offset` of item `item`.
char ItemByte(size_t item, uint64_t offset) {
  uint64_t x = (item + 1) * 0x9e3779b97f4a7c15ULL + offset;
  x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ULL;
  return static_cast<char>(x ^ (x >> 32));
}

// Copies every item through the rooms: each batch's slices are all copied
// in first (the client), then written out (the writers), so a slice that
// overlapped another in the room would corrupt it. Every item byte must be
// written exactly once and arrive unchanged.
void CheckBytesThroughRooms(const std::vector<v1::SaveItem>& items,
                            const std::vector<BatchLayout>& batches) {
  std::vector<std::string> out(items.size());
  std::vector<std::vector<uint8_t>> written(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    out[i].assign(items[i].bytes(), '\0');
    written[i].assign(items[i].bytes(), 0);
  }
  for (const BatchLayout& batch : batches) {
    std::string room(batch.room_bytes, '\xa5');
    for (const BatchSliceLayout& slice : batch.slices) {
      REQUIRE(slice.room_offset + slice.length <= room.size());
      for (uint64_t k = 0; k < slice.length; ++k) {
        room[slice.room_offset + k] = ItemByte(slice.item, slice.item_offset + k);
      }
    }
    for (const BatchSliceLayout& slice : batch.slices) {
      for (uint64_t k = 0; k < slice.length; ++k) {
        out[slice.item][slice.item_offset + k] = room[slice.room_offset + k];
        ++written[slice.item][slice.item_offset + k];
      }
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    INFO("item " << i << " of " << items[i].bytes() << " bytes");
    uint64_t not_once = 0;
    uint64_t wrong = 0;
    for (uint64_t k = 0; k < items[i].bytes(); ++k) {
      not_once += written[i][k] != 1;
      wrong += out[i][k] != ItemByte(i, k);
    }
    CHECK(not_once == 0);
    CHECK(wrong == 0);
  }
}

std::vector<BatchLayout> RunAndCheck(const std::vector<v1::SaveItem>& items, uint64_t chunk_bytes,
                                     uint64_t batch_bytes, uint64_t alignment) {
  std::vector<BatchLayout> batches = AllBatches(items, chunk_bytes, batch_bytes, alignment);
  CheckBatches(items, batches, chunk_bytes, batch_bytes, alignment);
  CheckBytesThroughRooms(items, batches);
  return batches;
}

TEST_CASE("save batches: a shard larger than a batch goes in whole chunks, tail last",
          "[save_batches]") {
  const uint64_t c = 4 * kKiB;
  const std::vector<BatchLayout> batches = RunAndCheck({Shard(10 * c + 100)}, c, 4 * c, 4 * kKiB);
  REQUIRE(batches.size() == 3);
  const uint64_t starts[] = {0, 4 * c, 8 * c};
  const uint64_t lengths[] = {4 * c, 4 * c, 2 * c + 100};
  const uint64_t rooms[] = {4 * c, 4 * c, 3 * c};
  for (size_t b = 0; b < 3; ++b) {
    REQUIRE(batches[b].slices.size() == 1);
    CHECK(batches[b].slices[0].item_offset == starts[b]);
    CHECK(batches[b].slices[0].length == lengths[b]);
    CHECK(batches[b].slices[0].room_offset == 0);
    CHECK(batches[b].room_bytes == rooms[b]);
  }
}

TEST_CASE("save batches: small items share a batch, each aligned in the room", "[save_batches]") {
  const uint64_t c = 4 * kKiB;
  const std::vector<BatchLayout> batches =
      RunAndCheck({Shard(100), Object(5), Shard(c + 1)}, c, 4 * c, 4 * kKiB);
  REQUIRE(batches.size() == 1);
  REQUIRE(batches[0].slices.size() == 3);
  CHECK(batches[0].slices[0].room_offset == 0);
  CHECK(batches[0].slices[1].room_offset == 4 * kKiB);
  CHECK(batches[0].slices[2].room_offset == 8 * kKiB);
  CHECK(batches[0].room_bytes == 16 * kKiB);
  CHECK(batches[0].last);
}

TEST_CASE("save batches: zero-byte items are skipped", "[save_batches]") {
  const uint64_t c = 4 * kKiB;
  SECTION("only zero-byte items: one empty, last batch") {
    const std::vector<BatchLayout> batches = RunAndCheck({Shard(0), Object(0)}, c, c, 4 * kKiB);
    REQUIRE(batches.size() == 1);
    CHECK(batches[0].slices.empty());
    CHECK(batches[0].room_bytes == 0);
  }
  SECTION("no items at all") {
    const std::vector<BatchLayout> batches = RunAndCheck({}, c, c, 4 * kKiB);
    REQUIRE(batches.size() == 1);
    CHECK(batches[0].slices.empty());
  }
  SECTION("around and between others; a trailing one does not delay `last`") {
    const std::vector<BatchLayout> batches =
        RunAndCheck({Shard(0), Shard(c), Object(0), Shard(0), Shard(c), Object(0)}, c, c, 4 * kKiB);
    REQUIRE(batches.size() == 2);
    CHECK(batches[0].slices.at(0).item == 1);
    CHECK(batches[1].slices.at(0).item == 4);
    CHECK(batches[1].last);
  }
}

TEST_CASE("save batches: an object goes whole, alone when it does not fit beside others",
          "[save_batches]") {
  const uint64_t c = 4 * kKiB;
  const std::vector<v1::SaveItem> items = {Shard(c), Object(3 * c), Shard(c), Object(c / 2),
                                           Object(c)};
  const std::vector<BatchLayout> batches = RunAndCheck(items, c, 2 * c, 4 * kKiB);
  // [shard] [the 3-chunk object alone] [shard, small object] [object]
  REQUIRE(batches.size() == 4);
  CHECK(batches[0].slices.size() == 1);
  REQUIRE(batches[1].slices.size() == 1);
  CHECK(batches[1].slices[0].item == 1);
  CHECK(batches[1].slices[0].length == 3 * c);
  CHECK(batches[2].slices.size() == 2);
  REQUIRE(batches[3].slices.size() == 1);
  CHECK(batches[3].slices[0].item == 4);
}

TEST_CASE("save batches: batch_bytes is whole chunks, at least one", "[save_batches]") {
  const uint64_t c = 4 * kKiB;
  SECTION("below one chunk: a chunk per batch") {
    const std::vector<BatchLayout> batches = RunAndCheck({Shard(3 * c)}, c, 1, 4 * kKiB);
    REQUIRE(batches.size() == 3);
    for (const BatchLayout& b : batches) CHECK(Payload(b) == c);
  }
  SECTION("2.5 chunks: two chunks per batch") {
    const std::vector<BatchLayout> batches = RunAndCheck({Shard(5 * c)}, c, 5 * c / 2, 4 * kKiB);
    REQUIRE(batches.size() == 3);
    CHECK(Payload(batches[0]) == 2 * c);
    CHECK(Payload(batches[1]) == 2 * c);
    CHECK(Payload(batches[2]) == c);
  }
}

TEST_CASE("save batches: random items, chunk, batch and alignment", "[save_batches]") {
  std::mt19937_64 rng(20240611);
  auto pick = [&](std::initializer_list<uint64_t> values) {
    return *(values.begin() + rng() % values.size());
  };
  for (int round = 0; round < 400; ++round) {
    const uint64_t alignment = pick({64, 512, 4096});
    const uint64_t chunk = alignment * pick({1, 2, 3, 8});
    const uint64_t batch =
        pick({1, chunk - 1, chunk, chunk + 1, 5 * chunk / 2, 7 * chunk, 64 * chunk});
    std::vector<v1::SaveItem> items;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const uint64_t bytes = pick({0, 1, alignment - 1, alignment + 1, chunk - 1, chunk, chunk + 1,
                                   3 * chunk + 17, rng() % (9 * chunk)});
      items.push_back(rng() % 3 == 0 ? Object(bytes) : Shard(bytes));
    }
    INFO("round " << round << ": alignment " << alignment << ", chunk " << chunk << ", batch "
                  << batch << ", " << items.size() << " items");
    RunAndCheck(items, chunk, batch, alignment);
  }
}

}  // namespace
}  // namespace ckpt::planning
