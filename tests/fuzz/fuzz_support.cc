#include "tests/fuzz/fuzz_support.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/planning/load_groups.h"
#include "daemon/planning/load_planner.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/node_load_plan.h"
#include "daemon/planning/node_save_plan.h"
#include "daemon/planning/planned_manifest.h"
#include "daemon/planning/save_batches.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/lib/align.h"
#include "proto/lib/copy_run.h"
#include "proto/lib/request_limits.h"

namespace ckpt::fuzz {
namespace {

// Batches walked per rank: NextBatchLayout runs once per NextSaveBatch call,
// so what matters is each call, not a whole 16 TiB stream.
constexpr int kMaxBatchesPerRank = 64;

// Copies into one request are expanded, to check that they tile it, only up
// to this many repetitions in all (a column of a tall tensor is one run of
// many repetitions: the planner is right to keep it one).
constexpr uint64_t kMaxExpandedCopies = 1 << 16;

// a + b and a * b, or false when they wrap.
bool Add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool Mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// One past the last byte a strided copy touches on one side, or false when
// it wraps: offset + (reps - 1) * stride + length.
bool StridedEnd(uint64_t offset, uint64_t reps, uint64_t stride, uint64_t length, uint64_t* end) {
  uint64_t last = 0;
  return Mul(reps - 1, stride, &last) && Add(offset, last, &last) && Add(last, length, end);
}

v1::HostIdentity FuzzHost() {
  v1::HostIdentity host;
  host.set_host("fuzzhost");
  return host;
}

// Streams one rank's items through NextBatchLayout as NextSaveBatch does and
// checks each batch: slices in order, whole chunks but an item's last,
// inside their item and the batch's room, and progress on every call.
void CheckBatches(const std::vector<v1::SaveItem>& items, uint64_t chunk_bytes) {
  planning::BatchCursor cursor;
  size_t item = 0;  // where the stream stands
  uint64_t offset = 0;
  auto skip_done = [&] {
    while (item < items.size() && offset >= items[item].bytes()) {
      ++item;
      offset = 0;
    }
  };
  for (int b = 0; b < kMaxBatchesPerRank; ++b) {
    const planning::BatchLayout layout =
        planning::NextBatchLayout(items, cursor, chunk_bytes, kBatchBytes, kPoolAlignment);
    CKPT_FUZZ_CHECK(layout.last || !layout.slices.empty(),
                    "a batch neither last nor moving on: the rank would ask forever");
    uint64_t room_end = 0;
    uint64_t payload = 0;
    for (const planning::BatchSliceLayout& slice : layout.slices) {
      skip_done();
      CKPT_FUZZ_CHECK(slice.item == item && slice.item_offset == offset,
                      absl::StrCat("slice of item ", slice.item, " at ", slice.item_offset,
                                   " where the stream stands at item ", item, " offset ", offset));
      const uint64_t bytes = items[item].bytes();
      CKPT_FUZZ_CHECK(
          slice.length > 0 && slice.length <= bytes - offset,
          absl::StrCat("slice of ", slice.length, " bytes at ", offset, " of an item of ", bytes));
      CKPT_FUZZ_CHECK(offset + slice.length == bytes || slice.length % chunk_bytes == 0,
                      "a slice that is not an item's last is not whole chunks");
      CKPT_FUZZ_CHECK(slice.room_offset % kPoolAlignment == 0 && slice.room_offset >= room_end,
                      "slices overlap in the room or are not aligned");
      room_end = slice.room_offset + AlignUp(slice.length, kPoolAlignment);
      payload += slice.length;
      offset += slice.length;
    }
    CKPT_FUZZ_CHECK(room_end <= layout.room_bytes, "slices run past the batch's room");
    CKPT_FUZZ_CHECK(layout.slices.size() <= 1 || payload <= kBatchBytes,
                    absl::StrCat("a batch of ", layout.slices.size(), " slices holds ", payload,
                                 " bytes, more than the batch size"));
    if (layout.last) {
      skip_done();
      CKPT_FUZZ_CHECK(item == items.size(), "the last batch leaves items not copied");
      return;
    }
  }
}

// The delivery's source lies inside one chunk's place in the room, and its
// destination inside the request's `dest_bytes`.
void CheckDelivery(const v1::Delivery& d, const planning::LoadGroup& group, uint64_t dest_bytes,
                   const std::string& who) {
  const uint64_t reps = std::max<uint64_t>(d.count(), 1);
  CKPT_FUZZ_CHECK(d.length() > 0, absl::StrCat(who, ": an empty delivery"));
  CKPT_FUZZ_CHECK(reps == 1 || (d.src_stride() >= d.length() && d.dest_stride() >= d.length()),
                  absl::StrCat(who, ": repetitions overlap"));
  const planning::GroupChunk* from = nullptr;
  for (const planning::GroupChunk& c : group.chunks) {
    if (d.pool_offset() >= c.room_offset && d.pool_offset() - c.room_offset < c.chunk->length()) {
      from = &c;
      break;
    }
  }
  CKPT_FUZZ_CHECK(from != nullptr,
                  absl::StrCat(who, ": pool offset ", d.pool_offset(), " is in no chunk"));
  uint64_t src_end = 0;
  CKPT_FUZZ_CHECK(
      StridedEnd(d.pool_offset(), reps, d.src_stride(), d.length(), &src_end) &&
          src_end <= from->room_offset + from->chunk->length(),
      absl::StrCat(who, ": copies past its chunk (", from->owner, ", ", from->chunk->length(),
                   " bytes at room offset ", from->room_offset, ") from ", d.pool_offset(), " x",
                   reps, " stride ", d.src_stride(), " length ", d.length()));
  uint64_t dest_end = 0;
  CKPT_FUZZ_CHECK(StridedEnd(d.dest_offset(), reps, d.dest_stride(), d.length(), &dest_end) &&
                      dest_end <= dest_bytes,
                  absl::StrCat(who, ": writes past the request's ", dest_bytes, " bytes"));
}

}  // namespace

void Fail(const char* file, int line, const char* condition, const std::string& why) {
  std::fprintf(stderr, "%s:%d: CKPT_FUZZ_CHECK(%s) failed: %s\n", file, line, condition,
               why.c_str());
  std::abort();
}

void Init() { google::protobuf::SetLogHandler(nullptr); }

planning::SavePlannerOptions DaemonPlannerOptions() {
  planning::SavePlannerOptions options;
  options.chunk_bytes = kChunkBytes;
  options.alignment = kPoolAlignment;
  options.limits.max_chunks_per_save = 4096;
  return options;
}

absl::StatusOr<v1::SaveAssignment> PlanSaveCase(const SaveCase& save,
                                                std::vector<v1::PlanSaveRequest>* requests) {
  const RequestLimits limits;
  const int world = save.attach().world_size();
  if (absl::Status s = ValidateAttachRequest(save.attach(), limits); !s.ok()) return s;
  if (world > kMaxFuzzWorld) return absl::UnimplementedError("world too large to fuzz");
  requests->assign(world, v1::PlanSaveRequest());
  planning::RankRequests ranks;
  for (int r = 0; r < world; ++r) {
    v1::AttachRequest attach = save.attach();
    attach.set_rank(r);
    if (absl::Status s = ValidateAttachRequest(attach, limits); !s.ok()) return s;
    v1::PlanSaveRequest& request = (*requests)[r];
    if (r < save.ranks_size()) request = save.ranks(r);
    if (r > 0) request.set_step((*requests)[0].step());
    // NodeService::PlanSave checks each request once, as it arrives.
    if (absl::Status s = ValidatePlanSaveRequest(request, limits); !s.ok()) return s;
    ranks[r] = &request;
  }
  // SaveSession::PlanAllRanks.
  const v1::NodeSavePlan plan = planning::BatchRankPlans(
      FuzzHost(), save.attach().job(), (*requests)[0].step(), world, kWriterThreads, ranks);
  return planning::PlanSave({plan}, DaemonPlannerOptions());
}

v1::CheckpointManifest CheckSaveAssignment(const v1::SaveAssignment& assignment,
                                           const std::vector<v1::PlanSaveRequest>& requests) {
  CKPT_FUZZ_CHECK(assignment.hosts_size() == 1, "one host planned, another count assigned");
  const v1::HostAssignment& host = assignment.hosts(0);

  // Items are aligned and do not overlap in their files.
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> extents;
  for (const v1::WriteItem& item : host.items()) {
    CKPT_FUZZ_CHECK(item.writer() >= 0 && item.writer() < host.files_size(),
                    absl::StrCat("item of writer ", item.writer(), ", not one of the host's ",
                                 host.files_size(), " files"));
    CKPT_FUZZ_CHECK(item.file_offset() % kPoolAlignment == 0, "item not aligned in its file");
    extents[host.files(item.writer())].push_back({item.file_offset(), item.bytes()});
  }
  for (auto& [file, list] : extents) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) {
      CKPT_FUZZ_CHECK(list[i - 1].first + list[i - 1].second <= list[i].first,
                      absl::StrCat("items overlap in ", file, " at ", list[i].first));
    }
  }

  // SaveSession::PlanAllRanks: each rank's items, then its batches.
  planning::RankRequests ranks;
  for (size_t r = 0; r < requests.size(); ++r) ranks[static_cast<int>(r)] = &requests[r];
  absl::StatusOr<std::map<int, planning::RankItems>> split =
      planning::SplitByRank(host, ranks, kPoolAlignment);
  CKPT_FUZZ_CHECK(split.ok(),
                  absl::StrCat("the node cannot split its own plan: ", split.status().ToString()));
  for (const auto& [r, items] : *split) CheckBatches(items.items, assignment.chunk_bytes());

  // What the commit writes (checksums filled in) and the catalog reads back.
  v1::CheckpointManifest manifest = planning::ManifestOf(assignment);
  (void)planning::ForEachMutableChunk(manifest, [](v1::StoredChunk& chunk, const std::string&) {
    if (planning::SaveChunkNeedsChecksum(chunk)) {
      chunk.set_crc32c(static_cast<uint32_t>(chunk.file_offset() * 2654435761u));
    }
    return absl::OkStatus();
  });
  const std::string bytes = planning::EncodeManifest(manifest);
  const planning::ManifestLimits manifest_limits;
  CKPT_FUZZ_CHECK(
      bytes.size() <= manifest_limits.max_manifest_bytes,
      absl::StrCat("the MANIFEST of ", bytes.size(), " bytes is larger than the catalog reads"));
  absl::StatusOr<v1::CheckpointManifest> read = planning::DecodeManifest(bytes, "MANIFEST");
  CKPT_FUZZ_CHECK(read.ok(), read.status().ToString());
  const absl::Status valid = planning::ValidateManifest(*read, manifest.job(), manifest.step(),
                                                        "MANIFEST", manifest_limits);
  CKPT_FUZZ_CHECK(valid.ok(), absl::StrCat("a save the daemon accepts commits a manifest it "
                                           "cannot load: ",
                                           valid.ToString()));
  return *std::move(read);
}

absl::StatusOr<v1::LoadAssignment> PlanLoadRequests(const v1::CheckpointManifest& manifest,
                                                    const std::vector<v1::LoadRequest>& ranks) {
  const RequestLimits limits;
  planning::LoadRequests requests;
  for (size_t r = 0; r < ranks.size(); ++r) {
    // NodeService::Load checks each request once, as it arrives.
    if (absl::Status s = ValidateLoadRequest(ranks[r], limits); !s.ok()) return s;
    requests[static_cast<int>(r)] = &ranks[r];
  }
  // LoadSession::Plan.
  return planning::PlanLoad(manifest, {planning::BatchLoadRequests(FuzzHost(), manifest.job(),
                                                                   manifest.step(), requests)});
}

void CheckLoadAssignment(const v1::LoadAssignment& assignment,
                         const std::vector<v1::LoadRequest>& ranks) {
  const int world = static_cast<int>(ranks.size());
  CKPT_FUZZ_CHECK(assignment.sizes_size() == world, "sizes not one per rank");
  for (int r = 0; r < world; ++r) {
    const v1::LoadAssignment::RankSizes& sizes = assignment.sizes(r);
    CKPT_FUZZ_CHECK(sizes.rank() == r && sizes.tensor_bytes_size() == ranks[r].tensors_size() &&
                        sizes.object_bytes_size() == ranks[r].object_keys_size(),
                    absl::StrCat("sizes of rank ", r, " do not match its requests"));
  }
  // Runs, with the library check the readers apply before copying.
  for (const v1::ChunkRead& read : assignment.reads()) {
    CKPT_FUZZ_CHECK(read.chunk().length() > 0, "a read of an empty chunk");
    for (const v1::CopyRun& run : read.runs()) {
      ForEachRunRank(run, [&](int rank) {
        CKPT_FUZZ_CHECK(rank >= 0 && rank < world &&
                            run.request() < static_cast<uint32_t>(ranks[rank].tensors_size()),
                        absl::StrCat("run for rank ", rank, " request ", run.request()));
        const absl::Status s =
            CheckCopyRun(run, read.chunk().length(),
                         assignment.sizes(rank).tensor_bytes(static_cast<int>(run.request())));
        CKPT_FUZZ_CHECK(s.ok(), absl::StrCat("read of ", read.chunk().file(), " at ",
                                             read.chunk().file_offset(), " (", read.fqn(),
                                             "): ", s.ToString()));
      });
    }
  }
  for (const v1::ObjectRead& read : assignment.objects()) {
    CKPT_FUZZ_CHECK(
        read.rank() >= 0 && read.rank() < world &&
            read.request() < static_cast<uint32_t>(ranks[read.rank()].object_keys_size()),
        absl::StrCat("object read for rank ", read.rank(), " request ", read.request()));
    CKPT_FUZZ_CHECK(assignment.sizes(read.rank()).object_bytes(static_cast<int>(read.request())) ==
                        read.chunk().length(),
                    "object size differs from its chunk");
  }

  // The groups the daemon reads and hands out (LoadSession::Plan).
  std::vector<std::vector<bool>> on_device(world);
  for (int r = 0; r < world; ++r) {
    for (const v1::TensorShard& t : ranks[r].tensors())
      on_device[r].push_back(t.has_device_buffer());
  }
  const std::vector<planning::LoadGroup> groups =
      planning::GroupLoadReads(assignment, world, on_device, kBatchBytes, kPoolAlignment);
  // The copies into each (rank, object?, request), to check that they tile
  // its bytes: nothing left unfilled, nothing written twice.
  struct Copies {
    std::vector<const v1::Delivery*> list;
    uint64_t repetitions = 0;
  };
  std::map<std::tuple<int, bool, uint32_t>, Copies> copies;
  auto count = [&](int rank, const v1::Delivery& d) {
    Copies& c = copies[{rank, d.target() == v1::Delivery::OBJECT, d.request()}];
    c.list.push_back(&d);
    c.repetitions += std::max<uint64_t>(d.count(), 1);
  };
  auto dest_bytes = [&](int rank, const v1::Delivery& d) -> uint64_t {
    const v1::LoadAssignment::RankSizes& sizes = assignment.sizes(rank);
    const int i = static_cast<int>(d.request());
    if (d.target() == v1::Delivery::OBJECT) {
      CKPT_FUZZ_CHECK(d.request() < static_cast<uint32_t>(sizes.object_bytes_size()),
                      "delivery to an object not asked for");
      return sizes.object_bytes(i);
    }
    CKPT_FUZZ_CHECK(d.request() < static_cast<uint32_t>(sizes.tensor_bytes_size()),
                    "delivery to a tensor not asked for");
    return sizes.tensor_bytes(i);
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    const planning::LoadGroup& group = groups[g];
    const std::string who = absl::StrCat("group ", g);
    CKPT_FUZZ_CHECK(!group.chunks.empty(), absl::StrCat(who, " reads nothing"));
    CKPT_FUZZ_CHECK(group.chunks.size() == 1 || group.room_bytes <= kBatchBytes,
                    absl::StrCat(who, " of ", group.chunks.size(), " chunks needs ",
                                 group.room_bytes, " bytes of room"));
    uint64_t end = 0;
    for (const planning::GroupChunk& c : group.chunks) {
      CKPT_FUZZ_CHECK(c.room_offset % kPoolAlignment == 0 && c.room_offset >= end,
                      absl::StrCat(who, ": chunks overlap in the room"));
      end = c.room_offset + c.chunk->length();
    }
    CKPT_FUZZ_CHECK(end <= group.room_bytes, absl::StrCat(who, ": chunks run past the room"));
    CKPT_FUZZ_CHECK(group.host.size() == static_cast<size_t>(world),
                    absl::StrCat(who, ": host deliveries not one list per rank"));
    for (int r = 0; r < world; ++r) {
      for (const v1::Delivery& d : group.host[r]) {
        CheckDelivery(d, group, dest_bytes(r, d), absl::StrCat(who, " rank ", r));
        count(r, d);
      }
    }
    for (const planning::DeviceCopy& copy : group.device) {
      CKPT_FUZZ_CHECK(copy.rank >= 0 && copy.rank < world &&
                          on_device[copy.rank].size() > copy.request &&
                          on_device[copy.rank][copy.request],
                      absl::StrCat(who, ": a device copy to a host request"));
      CheckDelivery(copy.delivery, group, dest_bytes(copy.rank, copy.delivery),
                    absl::StrCat(who, " device rank ", copy.rank));
      count(copy.rank, copy.delivery);
    }
  }
  // Every byte asked for arrives, once.
  auto check_tiled = [&](int rank, bool object, int i, uint64_t bytes) {
    const std::string who =
        absl::StrCat("rank ", rank, object ? " object " : " tensor ", "request ", i);
    const Copies& c = copies[{rank, object, static_cast<uint32_t>(i)}];
    if (c.repetitions > kMaxExpandedCopies) return;
    std::vector<std::pair<uint64_t, uint64_t>> pieces;  // [begin, end) in the request
    for (const v1::Delivery* d : c.list) {
      for (uint64_t k = 0; k < std::max<uint64_t>(d->count(), 1); ++k) {
        const uint64_t begin = d->dest_offset() + k * d->dest_stride();  // checked above
        pieces.push_back({begin, begin + d->length()});
      }
    }
    std::sort(pieces.begin(), pieces.end());
    uint64_t at = 0;
    for (const auto& [begin, end] : pieces) {
      CKPT_FUZZ_CHECK(begin == at,
                      absl::StrCat(who, ": bytes [", std::min(at, begin), ", ", std::max(at, begin),
                                   ") of ", bytes, begin < at ? " arrive twice" : " never arrive"));
      at = end;
    }
    CKPT_FUZZ_CHECK(at == bytes, absl::StrCat(who, ": gets ", at, " of its ", bytes, " bytes"));
  };
  for (int r = 0; r < world; ++r) {
    const v1::LoadAssignment::RankSizes& sizes = assignment.sizes(r);
    for (int i = 0; i < sizes.tensor_bytes_size(); ++i) {
      check_tiled(r, false, i, sizes.tensor_bytes(i));
    }
    for (int i = 0; i < sizes.object_bytes_size(); ++i) {
      check_tiled(r, true, i, sizes.object_bytes(i));
    }
  }
}

}  // namespace ckpt::fuzz

// Abseil's hash tables poison their empty slots under ASan (from Abseil
// 2023 on, Debian 13), but Debian's libabsl is not instrumented: its
// out-of-line parts never unpoison what the inlined parts poisoned, and ASan
// would report the first insert as a use after poison. ASan's own checks
// (overflows, use after free, leaks) stay; only poisoning asked for by
// library code is ignored. ASAN_OPTIONS may still override it.
extern "C" const char* __asan_default_options() { return "allow_user_poisoning=0"; }
