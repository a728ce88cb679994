#include "daemon/planning/global_load.h"

#include <google/protobuf/arena.h>

namespace ckpt::planning {

v1::ChunkRead* GlobalLoad::AddRead(uint32_t id, v1::LoadAssignment& out,
                                   absl::FunctionRef<bool(int rank)> keep) const {
  return AddReadOf(id, out.add_reads(), keep, false);
}

v1::ChunkRead* GlobalLoad::AddReadOf(uint32_t r, v1::ChunkRead* read,
                                     absl::FunctionRef<bool(int rank)> keep, bool all) const {
  const Chunk& chunk = chunks_[r];
  v1::StoredChunk* stored = read->mutable_chunk();
  const absl::string_view file = files_[chunk.file];
  stored->set_file(file.data(), file.size());
  stored->set_file_offset(chunk.file_offset);
  stored->set_shard_offset(chunk.shard_offset);
  stored->set_length(chunk.length);
  stored->set_crc32c(chunk.crc32c);
  if (chunk.encoded != nullptr) *stored = *chunk.encoded;  // and how it is stored
  read->set_fqn(*chunk.fqn);
  for (uint32_t u = first_use_[r]; u < first_use_[r + 1]; ++u) {
    const Run& run = runs_[uses_[u].run];
    const uint32_t region = uses_[u].region;
    const uint32_t asked = first_asker_[region + 1] - first_asker_[region];
    v1::CopyRun* copy = nullptr;
    for (uint32_t q = first_asker_[region]; q < first_asker_[region + 1]; ++q) {
      const Asker& asker = askers_[q];
      if (!keep(asker.rank)) continue;
      // The same run at the same place of another rank's list (a
      // replica): one more rank of the last copy.
      if (copy != nullptr && asker.index == copy->request()) {
        copy->add_more_ranks(asker.rank);
        continue;
      }
      copy = read->add_runs();
      copy->set_rank(asker.rank);
      copy->set_request(asker.index);
      copy->set_chunk_offset(run.chunk_offset);
      copy->set_dest_offset(run.dest_offset);
      copy->set_length(run.length);
      if (run.count > 1) {
        copy->set_count(run.count);
        copy->set_chunk_stride(run.chunk_stride);
        copy->set_dest_stride(run.dest_stride);
      }
      // Replicas nearly always ask at the same place: room for all.
      if (all && q == first_asker_[region] && asked > 1) {
        copy->mutable_more_ranks()->Reserve(static_cast<int>(asked - 1));
      }
    }
  }
  return read;
}

void GlobalLoad::ToAssignment(v1::LoadAssignment& out) const {
  out.MergeFrom(header_);
  // Made in the order the reads were found (their uses, and the askers of
  // the regions that use them, then lie next to each other in memory),
  // listed in file order: at a million reads every lookup out of order
  // was a cache miss, most of the time this takes.
  std::vector<v1::ChunkRead*> made(chunks_.size());
  const auto all = [](int) { return true; };
  for (uint32_t r = 0; r < chunks_.size(); ++r) {
    made[r] = AddReadOf(r, google::protobuf::Arena::CreateMessage<v1::ChunkRead>(out.GetArena()),
                        all, true);
  }
  google::protobuf::RepeatedPtrField<v1::ChunkRead>& listed = *out.mutable_reads();
  listed.Reserve(static_cast<int>(order_.size()));
  for (uint32_t r : order_) listed.AddAllocated(made[r]);
}

}  // namespace ckpt::planning
