#include "daemon/planning/manifest_footprint.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ckpt/v1/manifest.pb.h"

namespace ckpt::planning {
namespace {

namespace pb = google::protobuf;
using pb::internal::WireFormatLite;

// The heap costs the estimate charges (protobuf 3.x, 64-bit libstdc++;
// tests/unit compare the estimate with what parsing takes).
constexpr uint64_t kAllocOverhead = 16;  // malloc's header and rounding, per block
// A repeated message field's pointer to each element, capacity doubled.
constexpr uint64_t kPointerSlot = 2 * sizeof(void*);
// A set string is a std::string of its own; past the small-string buffer
// its characters are another block.
constexpr uint64_t kStringBytes = sizeof(std::string) + kAllocOverhead;
constexpr uint64_t kSmallString = 15;
// An unknown field: an entry in a vector (capacity doubled), its bytes in
// a string of their own when length-delimited; a group's fields, each at
// least a byte, as many entries.
constexpr uint64_t kUnknownField = 2 * 16;
constexpr uint64_t kUnknownGroupPerByte = 32;
// What ValidateManifest builds: an extent per chunk (in a vector, capacity
// doubled) and its place in the sort, a set node per tensor and object.
constexpr uint64_t kCheckPerChunk = 2 * 48 + 16;
constexpr uint64_t kCheckPerEntry = 64;
constexpr int kMaxDepth = 100;  // protobuf's own recursion limit

uint64_t StringBytes(uint64_t length) {
  return kStringBytes + (length > kSmallString ? length + 1 + kAllocOverhead : 0);
}

uint64_t ScalarBytes(const pb::FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return 8;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return 1;
    default:
      return 4;
  }
}

class Walker {
 public:
  explicit Walker(absl::string_view source) : source_(source) {}

  absl::Status Walk(absl::string_view payload, const pb::Descriptor& type) {
    pb::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(payload.data()),
                                static_cast<int>(payload.size()));
    in.SetTotalBytesLimit(static_cast<int>(payload.size()));
    return Message(in, type, 0);
  }

  ManifestFootprint& footprint() { return footprint_; }

 private:
  absl::Status Broken() const {
    return absl::DataLossError(absl::StrCat(source_, ": manifest does not parse"));
  }

  uint64_t MessageBytes(const pb::Descriptor& type) {
    auto [it, inserted] = message_bytes_.try_emplace(&type, 0);
    if (inserted) {
      const pb::Message* prototype = pb::MessageFactory::generated_factory()->GetPrototype(&type);
      it->second = (prototype != nullptr ? prototype->SpaceUsedLong() : 64) + kAllocOverhead;
    }
    return it->second;
  }

  void Count(const pb::FieldDescriptor& field) {
    if (!field.is_repeated()) return;
    const pb::Descriptor* type = field.message_type();
    if (type == v1::TensorEntry::descriptor()) {
      ++footprint_.tensors;
    } else if (type == v1::StoredShard::descriptor()) {
      ++footprint_.shards;
    } else if (type == v1::StoredChunk::descriptor()) {
      ++footprint_.chunks;
    } else if (type == v1::ObjectEntry::descriptor()) {
      ++footprint_.objects;
      ++footprint_.chunks;  // its chunk, present or not
    }
  }

  // Reads the fields up to the current limit (the message's end).
  absl::Status Message(pb::io::CodedInputStream& in, const pb::Descriptor& type, int depth) {
    if (depth > kMaxDepth) return Broken();
    for (;;) {
      const uint32_t tag = in.ReadTag();
      if (tag == 0) return in.ConsumedEntireMessage() ? absl::OkStatus() : Broken();
      const auto wire = WireFormatLite::GetTagWireType(tag);
      const pb::FieldDescriptor* field =
          type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
      if (field == nullptr || field->type() == pb::FieldDescriptor::TYPE_GROUP) {
        if (absl::Status s = Unknown(in, tag); !s.ok()) return s;
        continue;
      }
      const auto expected = WireFormatLite::WireTypeForFieldType(
          static_cast<WireFormatLite::FieldType>(field->type()));
      if (wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
          expected != WireFormatLite::WIRETYPE_LENGTH_DELIMITED && field->is_packable()) {
        if (absl::Status s = Packed(in, *field, expected); !s.ok()) return s;
        continue;
      }
      if (wire != expected) {
        if (absl::Status s = Unknown(in, tag); !s.ok()) return s;
        continue;
      }
      if (field->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
        uint32_t length = 0;
        if (!in.ReadVarint32(&length) || static_cast<int64_t>(length) > in.BytesUntilLimit()) {
          return Broken();
        }
        footprint_.parsed_bytes +=
            MessageBytes(*field->message_type()) + (field->is_repeated() ? kPointerSlot : 0);
        Count(*field);
        const pb::io::CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
        if (absl::Status s = Message(in, *field->message_type(), depth + 1); !s.ok()) return s;
        in.PopLimit(limit);
      } else if (wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {  // string, bytes
        uint32_t length = 0;
        if (!in.ReadVarint32(&length) || !in.Skip(static_cast<int>(length))) return Broken();
        footprint_.parsed_bytes += StringBytes(length) + (field->is_repeated() ? kPointerSlot : 0);
      } else {
        if (!WireFormatLite::SkipField(&in, tag)) return Broken();
        if (field->is_repeated()) footprint_.parsed_bytes += 2 * ScalarBytes(*field);
      }
    }
  }

  absl::Status Packed(pb::io::CodedInputStream& in, const pb::FieldDescriptor& field,
                      WireFormatLite::WireType element_wire) {
    uint32_t length = 0;
    if (!in.ReadVarint32(&length) || static_cast<int64_t>(length) > in.BytesUntilLimit()) {
      return Broken();
    }
    uint64_t elements = 0;
    if (element_wire == WireFormatLite::WIRETYPE_FIXED32) {
      elements = length / 4;
    } else if (element_wire == WireFormatLite::WIRETYPE_FIXED64) {
      elements = length / 8;
    } else {
      const void* data = nullptr;
      int size = 0;
      if (!in.GetDirectBufferPointer(&data, &size) || static_cast<uint32_t>(size) < length) {
        return Broken();
      }
      const auto* bytes = static_cast<const uint8_t*>(data);
      for (uint32_t i = 0; i < length; ++i) elements += (bytes[i] & 0x80) == 0 ? 1 : 0;
    }
    if (!in.Skip(static_cast<int>(length))) return Broken();
    footprint_.parsed_bytes += kAllocOverhead + 2 * elements * ScalarBytes(field);
    return absl::OkStatus();
  }

  absl::Status Unknown(pb::io::CodedInputStream& in, uint32_t tag) {
    const int start = in.CurrentPosition();
    if (!WireFormatLite::SkipField(&in, tag)) return Broken();
    const auto bytes = static_cast<uint64_t>(in.CurrentPosition() - start);
    footprint_.parsed_bytes += kUnknownField;
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
        footprint_.parsed_bytes += StringBytes(bytes);
        break;
      case WireFormatLite::WIRETYPE_START_GROUP:
        footprint_.parsed_bytes += kUnknownGroupPerByte * bytes;
        break;
      case WireFormatLite::WIRETYPE_END_GROUP:
        return Broken();  // no group is open here
      default:
        break;
    }
    return absl::OkStatus();
  }

  const absl::string_view source_;
  ManifestFootprint footprint_;
  absl::flat_hash_map<const pb::Descriptor*, uint64_t> message_bytes_;
};

absl::Status OverLimit(absl::string_view source, int64_t count, absl::string_view what,
                       int64_t limit, absl::string_view flag) {
  return absl::FailedPreconditionError(absl::StrCat(source, ": the manifest holds ", count, " ",
                                                    what, ", more than the limit of ", limit, " (",
                                                    flag, "); it was not parsed"));
}

}  // namespace

uint64_t ManifestFootprint::ReadBytes(uint64_t file_bytes) const {
  return file_bytes + parsed_bytes + kCheckPerChunk * static_cast<uint64_t>(chunks) +
         kCheckPerEntry * static_cast<uint64_t>(tensors + objects);
}

absl::StatusOr<ManifestFootprint> MeasureManifest(absl::string_view payload,
                                                  absl::string_view source) {
  Walker walker(source);
  if (absl::Status s = walker.Walk(payload, *v1::CheckpointManifest::descriptor()); !s.ok()) {
    return s;
  }
  return walker.footprint();
}

absl::StatusOr<ManifestFootprint> MeasureChunkTable(absl::string_view payload,
                                                    absl::string_view source) {
  Walker walker(source);
  if (absl::Status s = walker.Walk(payload, *v1::ChunkTable::descriptor()); !s.ok()) return s;
  return walker.footprint();
}

uint64_t JoinedChunkBytes(size_t file_name_bytes) {
  static const uint64_t message =
      v1::StoredChunk::default_instance().SpaceUsedLong() + kAllocOverhead;
  return message + kPointerSlot + StringBytes(file_name_bytes) + kCheckPerChunk;
}

uint64_t ExpandedShardBytes(const v1::Region& region) {
  static const uint64_t message =
      v1::StoredShard::default_instance().SpaceUsedLong() + kAllocOverhead + kPointerSlot;
  switch (region.kind_case()) {
    case v1::Region::kBox: {
      // The region, its box and the box's two arrays, a block each.
      const uint64_t dims =
          static_cast<uint64_t>(std::max(region.box().offsets_size(), region.box().lengths_size()));
      return message + sizeof(v1::Region) + sizeof(v1::Box) + 4 * kAllocOverhead +
             2 * (sizeof(int64_t) + dims * sizeof(int64_t));
    }
    case v1::Region::kFlat:
      return message + sizeof(v1::Region) + sizeof(v1::FlatRange) + 2 * kAllocOverhead;
    default:
      return message;
  }
}

absl::Status CheckManifestFootprint(const ManifestFootprint& footprint, uint64_t file_bytes,
                                    absl::string_view source, const ManifestLimits& limits) {
  if (footprint.tensors > limits.max_tensors) {
    return OverLimit(source, footprint.tensors, "tensors", limits.max_tensors,
                     "--max_manifest_tensors");
  }
  if (footprint.shards > limits.max_shards) {
    return OverLimit(source, footprint.shards, "shards", limits.max_shards,
                     "--max_manifest_shards");
  }
  if (footprint.chunks > limits.max_chunks) {
    return OverLimit(source, footprint.chunks, "chunks", limits.max_chunks,
                     "--max_manifest_chunks");
  }
  if (footprint.objects > limits.max_objects) {
    return OverLimit(source, footprint.objects, "objects", limits.max_objects,
                     "--max_manifest_objects");
  }
  const uint64_t bytes = footprint.ReadBytes(file_bytes);
  if (bytes > limits.max_memory_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        source, ": reading the manifest would take about ", bytes >> 20, " MiB of memory (",
        file_bytes, " bytes on disk; ", footprint.tensors, " tensors, ", footprint.shards,
        " shards, ", footprint.chunks, " chunks), more than the limit of ", limits.max_memory_bytes,
        " bytes (--max_manifest_memory_bytes); it was not parsed"));
  }
  return absl::OkStatus();
}

}  // namespace ckpt::planning
