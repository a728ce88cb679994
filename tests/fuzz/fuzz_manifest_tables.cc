// Fuzz target: a split manifest (manifest_tables.h) as the catalog reads
// it: the root decoded within the limits, its chunk tables (TABLES, the
// case's tables back to back) joined in
// (JoinChunkTables) and the whole validated (ValidateManifest); each table
// also decoded on its own. On a manifest that validates, a split of it and
// a join again must give it back, every field.
//
// The same files are also read straight into columns, as a load reads
// them (column_manifest_read.h): that read must refuse what the join and
// the check refuse (but for a memory limit, which the smaller columns may
// stay within), take what they take, and hold what the joined manifest
// holds.
//
// A mutated file almost never keeps a matching trailer, nor the root its
// tables' sizes and checksums, so each input is also read with every
// trailer made right and the root's entries made to match the tables: the
// mutations reach the parsers and the checks behind them.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "daemon/planning/column_manifest_read.h"
#include "daemon/planning/compact_root.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/manifest_tables.h"
#include "tests/fuzz/fuzz_cases.pb.h"
#include "tests/fuzz/fuzz_support.h"

namespace ckpt::fuzz {
namespace {

// Small enough that a crafted root's claims are refused fast.
planning::ManifestLimits Limits() {
  planning::ManifestLimits limits;
  limits.max_manifest_bytes = 16 << 20;
  limits.max_memory_bytes = 64 << 20;
  limits.max_chunks = 1 << 16;
  limits.max_shards = 1 << 14;
  return limits;
}

// TABLES: the case's tables back to back.
planning::ChunkTablesReader ReaderOf(const SplitManifestCase& c) {
  std::string file;
  for (const std::string& t : c.tables()) file += t;
  return [file](uint64_t offset, uint64_t length, uint64_t total) -> absl::StatusOr<std::string> {
    if (file.size() != total) return absl::DataLossError("TABLES: size");
    CKPT_FUZZ_CHECK(offset <= total && length <= total - offset,
                    "a join read past the TABLES size it checked");
    return file.substr(offset, length);
  };
}

// Reads the case as the catalog does; on success checks the round trip.
void Read(const SplitManifestCase& c) {
  const planning::ManifestLimits limits = Limits();
  for (const std::string& table : c.tables()) {
    (void)planning::DecodeChunkTable(table, "table", limits);
  }
  planning::ManifestFootprint footprint;
  absl::StatusOr<v1::CheckpointManifest> m =
      planning::DecodeBoundedManifest(c.root(), "MANIFEST", limits, &footprint);
  if (!m.ok()) return;
  const absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> columns =
      planning::ReadColumnManifest(*m, footprint, c.root().size(), m->job(), m->step(), "MANIFEST",
                                   limits, ReaderOf(c));
  absl::Status joined =
      planning::JoinChunkTables(*m, footprint, c.root().size(), "MANIFEST", limits, ReaderOf(c));
  if (joined.ok()) joined = planning::ValidateManifest(*m, m->job(), m->step(), "MANIFEST", limits);
  if (!joined.ok()) {
    CKPT_FUZZ_CHECK(!columns.ok() || absl::IsFailedPrecondition(joined),
                    "the columns' read takes a split the join and check refuse: " +
                        std::string(joined.message()));
    return;
  }
  CKPT_FUZZ_CHECK(columns.ok(), "the columns' read refuses a split the join and check take: " +
                                    columns.status().ToString());
  {
    absl::StatusOr<std::shared_ptr<const planning::ColumnManifest>> expected =
        planning::ColumnManifest::FromManifest(*m);
    CKPT_FUZZ_CHECK(expected.ok(), "a checked manifest does not go into columns");
    const std::string difference = (*columns)->Difference(**expected);
    CKPT_FUZZ_CHECK(difference.empty(),
                    "the columns read differ from the joined manifest's: " + difference);
  }
  // A split writes the fields it knows; fields of a later format are not
  // carried over.
  m->DiscardUnknownFields();
  // Both roots: compact (as written now) and format 2 (as read still).
  for (const uint32_t format :
       {planning::kCompactRootFormatVersion, planning::kSplitManifestFormatVersion}) {
    std::optional<planning::SplitManifestFiles> split = planning::SplitManifest(*m, limits, format);
    if (!split.has_value()) continue;
    SplitManifestCase again;
    again.set_root(split->root);
    for (const std::string& t : split->tables) again.add_tables(t);
    absl::StatusOr<v1::CheckpointManifest> rejoined =
        planning::DecodeBoundedManifest(again.root(), "MANIFEST", limits, &footprint);
    CKPT_FUZZ_CHECK(rejoined.ok(), "a split's root does not decode");
    CKPT_FUZZ_CHECK(planning::JoinChunkTables(*rejoined, footprint, again.root().size(), "MANIFEST",
                                              limits, ReaderOf(again))
                        .ok(),
                    "a split does not join");
    google::protobuf::util::MessageDifferencer differ;
    std::string diff;
    differ.ReportDifferencesToString(&diff);
    const bool same = differ.Compare(*m, *rejoined);
    CKPT_FUZZ_CHECK(same, "a split and a join changed the manifest: " + diff.substr(0, 2000));
  }
}

// The case with every trailer right and the root's entries matching the
// tables as they are.
SplitManifestCase Consistent(const SplitManifestCase& c) {
  SplitManifestCase fixed;
  for (const std::string& t : c.tables()) {
    if (t.size() < 4) return fixed;
    *fixed.add_tables() = planning::WithCrcTrailer(t.substr(0, t.size() - 4));
  }
  if (c.root().size() < 4) return fixed;
  v1::CheckpointManifest root;
  if (!root.ParseFromArray(c.root().data(), static_cast<int>(c.root().size() - 4))) return fixed;
  for (int i = 0; i < root.chunk_tables_size() && i < fixed.tables_size(); ++i) {
    v1::ChunkTableRef* ref = root.mutable_chunk_tables(i);
    ref->set_bytes(fixed.tables(i).size());
    ref->set_crc32c(planning::TrailerCrc(fixed.tables(i)));
  }
  fixed.set_root(planning::EncodeManifest(root));
  return fixed;
}

}  // namespace
}  // namespace ckpt::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckpt::fuzz::Init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckpt::fuzz::SplitManifestCase c;
  if (!c.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (c.tables_size() > 4096) return 0;
  ckpt::fuzz::Read(c);
  ckpt::fuzz::Read(ckpt::fuzz::Consistent(c));
  return 0;
}
