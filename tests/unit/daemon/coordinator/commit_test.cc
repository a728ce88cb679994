// The commit protocol, the catalog and the Coordinator end to end, on the
// in-memory backend; storage faults through the fault-injection decorator.
#include "daemon/coordinator/commit.h"
#include "proto/lib/copy_run.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/catalog.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/storage/backend_factory.h"
#include "daemon/storage/fault_injection.h"
#include "daemon/storage/layout.h"
#include "proto/lib/crc32c.h"
#include "tests/catch.h"
#include "tests/unit/daemon/planning/test_helpers.h"

namespace ckpt::coordinator {
namespace {

using namespace planning::testing;  // NOLINT
using storage::Backend;

constexpr char kRoot[] = "/ckpt";

void WriteFile(storage::Backend& backend, const std::string& path, const std::string& contents) {
  auto file = backend.NewWritableFile(path);
  CKPT_REQUIRE_OK(file);
  CKPT_REQUIRE_OK((*file)->WriteAt(0, contents.data(), contents.size()));
  CKPT_REQUIRE_OK((*file)->Sync());
  CKPT_REQUIRE_OK((*file)->Close());
}

std::string ReadFile(storage::Backend& backend, const std::string& path) {
  absl::StatusOr<std::string> contents = storage::ReadWholeFile(backend, path);
  CKPT_REQUIRE_OK(contents);
  return *contents;
}

bool Exists(storage::Backend& backend, const std::string& path) {
  absl::StatusOr<bool> exists = backend.Exists(path);
  CKPT_REQUIRE_OK(exists);
  return *exists;
}

std::vector<std::string> List(storage::Backend& backend, const std::string& path) {
  absl::StatusOr<std::vector<std::string>> names = backend.ListDir(path);
  CKPT_REQUIRE_OK(names);
  return *names;
}

v1::CheckpointManifest ManifestFor(const std::string& job, int64_t step, uint32_t crc) {
  v1::CheckpointManifest m;
  m.set_format_version(1);
  m.set_job(job);
  m.set_step(step);
  v1::TensorEntry* t = m.add_tensors();
  t->set_fqn("w");
  t->set_dtype(v1::UINT8);
  t->add_global_shape(5);
  v1::StoredChunk* c = t->add_shards()->add_chunks();
  c->set_file("data/h0-0.bin");
  c->set_length(5);
  c->set_crc32c(crc);
  return m;
}

// A partial directory holding one data file, as the writers leave it.
std::string MakePartial(storage::Backend& backend, const std::string& job, int64_t step,
                        const std::string& id, const std::string& data) {
  const std::string partial = storage::PartialDir(kRoot, job, step, id);
  CKPT_REQUIRE_OK(backend.CreateDirs(partial + "/data"));
  WriteFile(backend, partial + "/data/h0-0.bin", data);
  return partial;
}

// ---------------------------------------------------------------------------
// CommitCheckpoint

TEST_CASE("commit renames the partial directory to step-N and writes LATEST", "[commit]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  const std::string partial = MakePartial(*backend, "job", 7, "abc", "hello");
  const v1::CheckpointManifest manifest = ManifestFor("job", 7, 0x11111111);
  CKPT_REQUIRE_OK(CommitCheckpoint(*backend, kRoot, partial, manifest));

  CHECK_FALSE(Exists(*backend, partial));
  CHECK(List(*backend, "/ckpt/job") == std::vector<std::string>{"LATEST", "step-7"});
  CHECK(List(*backend, "/ckpt/job/step-7") == std::vector<std::string>{"MANIFEST", "data"});
  CHECK(ReadFile(*backend, "/ckpt/job/step-7/data/h0-0.bin") == "hello");
  const std::string bytes = ReadFile(*backend, "/ckpt/job/step-7/MANIFEST");
  CHECK(bytes == planning::EncodeManifest(manifest));
  absl::StatusOr<v1::CheckpointManifest> decoded = planning::DecodeManifest(bytes, "MANIFEST");
  CKPT_REQUIRE_OK(decoded);
  CHECK(decoded->SerializeAsString() == manifest.SerializeAsString());
  CHECK(ReadFile(*backend, "/ckpt/job/LATEST") == "7\n");

  // A later step replaces LATEST.
  const std::string partial12 = MakePartial(*backend, "job", 12, "def", "world");
  CKPT_REQUIRE_OK(CommitCheckpoint(*backend, kRoot, partial12, ManifestFor("job", 12, 2)));
  CHECK(ReadFile(*backend, "/ckpt/job/LATEST") == "12\n");
  CHECK(List(*backend, "/ckpt/job") == std::vector<std::string>{"LATEST", "step-12", "step-7"});
}

TEST_CASE("committing an existing step is ALREADY_EXISTS and leaves it intact", "[commit]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  const std::string first = MakePartial(*backend, "job", 7, "abc", "first");
  CKPT_REQUIRE_OK(CommitCheckpoint(*backend, kRoot, first, ManifestFor("job", 7, 1)));
  const std::string old_manifest = ReadFile(*backend, "/ckpt/job/step-7/MANIFEST");

  const std::string second = MakePartial(*backend, "job", 7, "xyz", "other");
  CKPT_REQUIRE_ERROR(CommitCheckpoint(*backend, kRoot, second, ManifestFor("job", 7, 2)),
                     absl::StatusCode::kAlreadyExists, "commit: /ckpt/job/step-7 exists");
  CHECK(ReadFile(*backend, "/ckpt/job/step-7/MANIFEST") == old_manifest);
  CHECK(ReadFile(*backend, "/ckpt/job/step-7/data/h0-0.bin") == "first");
  CHECK(List(*backend, "/ckpt/job/step-7") == std::vector<std::string>{"MANIFEST", "data"});
  CHECK(ReadFile(*backend, "/ckpt/job/LATEST") == "7\n");
  // The losing partial directory is still there for the caller to abort.
  CHECK(Exists(*backend, second + "/data/h0-0.bin"));
}

TEST_CASE("commit of a missing partial directory fails and creates nothing", "[commit]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  CKPT_REQUIRE_OK(backend->CreateDirs("/ckpt/job"));
  const absl::Status s = CommitCheckpoint(
      *backend, kRoot, storage::PartialDir(kRoot, "job", 3, "gone"), ManifestFor("job", 3, 1));
  CHECK_FALSE(s.ok());
  CHECK(std::string(s.message()).find("commit: ") == 0);
  CHECK(List(*backend, "/ckpt/job").empty());
}

// ---------------------------------------------------------------------------
// Catalog

TEST_CASE("catalog lists committed steps only", "[catalog]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Catalog catalog(*backend, kRoot);
  for (int64_t step : {3, 10, 1}) {
    const std::string partial = MakePartial(*backend, "job", step, "p", "x");
    CKPT_REQUIRE_OK(CommitCheckpoint(*backend, kRoot, partial, ManifestFor("job", step, 9)));
  }
  // Partial directories and junk around them.
  CKPT_REQUIRE_OK(backend->CreateDirs(storage::PartialDir(kRoot, "job", 11, "q") + "/data"));
  for (const char* junk : {"step-abc", "step-", "step--1", "step-5x", "junk", "step-2.tmp",
                           "step-007", "step-+12", "step- 13", "Step-14"}) {
    CKPT_REQUIRE_OK(backend->CreateDirs(absl::StrCat("/ckpt/job/", junk)));
  }
  WriteFile(*backend, "/ckpt/job/notes", "n");

  absl::StatusOr<std::vector<int64_t>> steps = catalog.ListSteps("job");
  CKPT_REQUIRE_OK(steps);
  CHECK(*steps == std::vector<int64_t>{1, 3, 10});

  // Step 1 was committed last: a rollback, and LATEST says it is latest.
  absl::StatusOr<int64_t> latest = catalog.ResolveStep("job", -1);
  CKPT_REQUIRE_OK(latest);
  CHECK(*latest == 1);
  absl::StatusOr<int64_t> three = catalog.ResolveStep("job", 3);
  CKPT_REQUIRE_OK(three);
  CHECK(*three == 3);
  absl::StatusOr<v1::CheckpointManifest> m = catalog.ReadManifest("job", -1);
  CKPT_REQUIRE_OK(m);
  CHECK(m->step() == 1);
  absl::StatusOr<v1::CheckpointManifest> ten = catalog.ReadManifest("job", 10);
  CKPT_REQUIRE_OK(ten);
  CHECK(ten->step() == 10);

  CKPT_REQUIRE_ERROR(catalog.ResolveStep("job", 4), absl::StatusCode::kNotFound, "job", "step 4");
  CKPT_REQUIRE_ERROR(catalog.ResolveStep("job", 11), absl::StatusCode::kNotFound, "step 11");
  CKPT_REQUIRE_ERROR(catalog.ResolveStep("job", -2), absl::StatusCode::kInvalidArgument);
  CKPT_REQUIRE_ERROR(catalog.ResolveStep("nojob", -1), absl::StatusCode::kNotFound, "nojob");
  CKPT_REQUIRE_ERROR(catalog.ResolveStep("nojob", 3), absl::StatusCode::kNotFound, "nojob");
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("job", 4), absl::StatusCode::kNotFound);
  CKPT_REQUIRE_ERROR(catalog.ListSteps("../x"), absl::StatusCode::kInvalidArgument, "../x");

  absl::StatusOr<std::vector<int64_t>> none = catalog.ListSteps("nojob");
  CKPT_REQUIRE_OK(none);
  CHECK(none->empty());
  // A job directory with only a partial save has no checkpoint.
  CKPT_REQUIRE_OK(backend->CreateDirs(storage::PartialDir(kRoot, "fresh", 1, "q")));
  CKPT_REQUIRE_ERROR(catalog.ResolveStep("fresh", -1), absl::StatusCode::kNotFound, "fresh");
}

TEST_CASE("catalog reports a corrupt manifest as DATA_LOSS naming it", "[catalog]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Catalog catalog(*backend, kRoot);
  const std::string partial = MakePartial(*backend, "job", 2, "p", "x");
  CKPT_REQUIRE_OK(CommitCheckpoint(*backend, kRoot, partial, ManifestFor("job", 2, 9)));
  std::string bytes = ReadFile(*backend, "/ckpt/job/step-2/MANIFEST");
  bytes[3] ^= 0x10;
  WriteFile(*backend, "/ckpt/job/step-2/MANIFEST", bytes);
  CKPT_REQUIRE_ERROR(catalog.ReadManifest("job", 2), absl::StatusCode::kDataLoss,
                     "/ckpt/job/step-2/MANIFEST");
}

TEST_CASE("RemoveStalePartials removes only this host's earlier instances' partials", "[catalog]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  CatalogOptions options;
  options.host = "h-0";  // a '-' in the host name must not confuse the parse
  options.instance = "00000000000000aa";
  Catalog catalog(*backend, kRoot, options);
  CHECK(catalog.host() == "h-0");
  CHECK(catalog.instance() == "00000000000000aa");
  const std::string earlier = storage::PartialId("h-0", "0123456789abcdef", 0);
  const std::string mine = catalog.NewPartialId();
  CHECK(mine == "h-0-00000000000000aa-0");
  CHECK(catalog.NewPartialId() == "h-0-00000000000000aa-1");
  CKPT_REQUIRE_OK(backend->CreateDirs(storage::PartialDir(kRoot, "jobA", 3, earlier) + "/data"));
  WriteFile(*backend, storage::PartialDir(kRoot, "jobA", 3, earlier) + "/data/h-0-0.bin", "x");
  CKPT_REQUIRE_OK(backend->CreateDirs(
      storage::PartialDir(kRoot, "jobB", 1, storage::PartialId("h-0", "fedcba9876543210", 7))));
  // This instance's own save in flight, other hosts' saves on the shared
  // root, and partials of older versions that do not name their owner.
  CKPT_REQUIRE_OK(backend->CreateDirs(storage::PartialDir(kRoot, "jobA", 4, mine)));
  CKPT_REQUIRE_OK(backend->CreateDirs(
      storage::PartialDir(kRoot, "jobA", 5, storage::PartialId("h", "0123456789abcdef", 0))));
  CKPT_REQUIRE_OK(backend->CreateDirs(
      storage::PartialDir(kRoot, "jobA", 6, storage::PartialId("h-00", "0123456789abcdef", 0))));
  CKPT_REQUIRE_OK(backend->CreateDirs(storage::PartialDir(kRoot, "jobA", 7, "deadbeef")));
  const std::string committed = MakePartial(*backend, "jobA", 2, "p", "keep");
  CKPT_REQUIRE_OK(CommitCheckpoint(*backend, kRoot, committed, ManifestFor("jobA", 2, 9)));
  // Look-alikes that must stay.
  CKPT_REQUIRE_OK(backend->CreateDirs("/ckpt/jobA/step-2/.step-9.partial-" + earlier));
  CKPT_REQUIRE_OK(backend->CreateDirs("/ckpt/jobA/.step-3.tmp"));
  CKPT_REQUIRE_OK(backend->CreateDirs("/ckpt/jobA/step-5.partial-" + earlier));
  WriteFile(*backend, "/ckpt/README", "not a job");

  absl::StatusOr<int> removed = catalog.RemoveStalePartials();
  CKPT_REQUIRE_OK(removed);
  CHECK(*removed == 2);
  CHECK(List(*backend, "/ckpt/jobA") ==
        std::vector<std::string>{
            ".step-3.tmp", ".step-4.partial-" + mine, ".step-5.partial-h-0123456789abcdef-0",
            ".step-6.partial-h-00-0123456789abcdef-0", ".step-7.partial-deadbeef", "LATEST",
            "step-2", "step-5.partial-" + earlier});
  CHECK(List(*backend, "/ckpt/jobB").empty());
  CHECK(Exists(*backend, "/ckpt/jobA/step-2/.step-9.partial-" + earlier));
  CHECK(ReadFile(*backend, "/ckpt/jobA/step-2/data/h0-0.bin") == "keep");
  CHECK(ReadFile(*backend, "/ckpt/README") == "not a job");

  absl::StatusOr<int> again = catalog.RemoveStalePartials();
  CKPT_REQUIRE_OK(again);
  CHECK(*again == 0);

  // The next daemon start on this host is another instance: now the
  // previous one's partial goes too.
  Catalog restarted(*backend, kRoot, CatalogOptions{"h-0", "", {}});
  CHECK(restarted.instance() != catalog.instance());
  CHECK(restarted.instance().size() == storage::kInstanceIdLength);
  absl::StatusOr<int> later = restarted.RemoveStalePartials();
  CKPT_REQUIRE_OK(later);
  CHECK(*later == 1);
  CHECK_FALSE(Exists(*backend, storage::PartialDir(kRoot, "jobA", 4, mine)));
}

TEST_CASE("layout names", "[catalog]") {
  CHECK(storage::StepDir("/r", "j", 12) == "/r/j/step-12");
  CHECK(storage::PartialDir("/r", "j", 12, "ab") == "/r/j/.step-12.partial-ab");
  CHECK(storage::ParseStepDirName("step-0") == std::optional<int64_t>(0));
  CHECK(storage::ParseStepDirName("step-9223372036854775807") ==
        std::optional<int64_t>(INT64_C(9223372036854775807)));
  CHECK(storage::ParseStepDirName("step-9223372036854775808") == std::nullopt);
  CHECK(storage::ParseStepDirName("step-") == std::nullopt);
  CHECK(storage::ParseStepDirName("step--3") == std::nullopt);
  CHECK(storage::ParseStepDirName("step-007") == std::nullopt);
  CHECK(storage::ParseStepDirName("step-+7") == std::nullopt);
  CHECK(storage::ParseStepDirName("step- 7") == std::nullopt);
  CHECK(storage::ParseStepDirName("step-7 ") == std::nullopt);
  CHECK(storage::ParseStepDirName(".step-7.partial-x") == std::nullopt);
  CHECK(storage::IsPartialDirName(".step-7.partial-x"));
  CHECK_FALSE(storage::IsPartialDirName("step-7"));
  CHECK_FALSE(storage::IsPartialDirName(".step-7.tmp"));
  const std::optional<storage::PartialDirName> parsed =
      storage::ParsePartialDirName(".step-12.partial-host-a.b-0123456789abcdef-42");
  REQUIRE(parsed.has_value());
  CHECK(parsed->step == 12);
  CHECK(parsed->host == "host-a.b");
  CHECK(parsed->instance == "0123456789abcdef");
  for (const char* bad :
       {".step-7.partial-x", ".step-7.partial-h-0123456789abcdef",
        ".step-7.partial--0123456789abcdef-1", ".step-7.partial-h-0123456789ABCDEF-1",
        ".step-7.partial-h-0123456789abcdef-", ".step-07.partial-h-0123456789abcdef-1",
        ".step-7.partial-h-0123456789abcdef-1x", "step-7.partial-h-0123456789abcdef-1"}) {
    INFO(bad);
    CHECK_FALSE(storage::ParsePartialDirName(bad).has_value());
  }
  CHECK(storage::ParseLatestContents("12\n") == std::optional<int64_t>(12));
  CHECK(storage::ParseLatestContents("12") == std::nullopt);
  CHECK(storage::ParseLatestContents("012\n") == std::nullopt);
  CHECK(storage::ParseLatestContents("\n") == std::nullopt);
  CHECK(storage::ParseLatestContents("-1\n") == std::nullopt);
}

// ---------------------------------------------------------------------------
// Coordinator end to end

// A single-host save of two tensors and two objects over 2 ranks.
v1::NodeSavePlan TwoRankPlan(int64_t step) {
  v1::NodeSavePlan node = Node("h0", 2, 2, {0, 1}, "job", step);
  AddShard(node, 0, BoxShard("w", v1::FLOAT32, {64, 50}, {0, 0}, {32, 50}));
  AddShard(node, 1, BoxShard("w", v1::FLOAT32, {64, 50}, {32, 0}, {32, 50}));
  AddShard(node, 0, Whole("b", v1::BFLOAT16, {3000}));
  AddShard(node, 1, Whole("b", v1::BFLOAT16, {3000}));
  *RankOf(node, 0).add_objects() = Object("rng", false, 33);
  *RankOf(node, 1).add_objects() = Object("rng", false, 34);
  *RankOf(node, 0).add_objects() = Object("cfg", true, 5000);
  return node;
}

// Does what the node's writers do: writes every item into its data file in
// the partial directory, fsyncs, and reports every chunk's CRC32C.
v1::NodePersistReport WriteItems(storage::Backend& backend, const v1::SaveAssignment& a,
                                 v1::NodeSavePlan node) {
  const std::string dir = absl::StrCat(kRoot, "/", a.partial_dir());
  std::map<std::string, std::string> files;
  for (const v1::WriteItem& item : a.hosts(0).items()) {
    const v1::RankSavePlan& rank = RankOf(node, item.rank());
    std::string bytes;
    if (item.is_object()) {
      const v1::ObjectDesc& o = rank.objects(static_cast<int>(item.index()));
      bytes = ObjectBytes(o.key(), o.global() ? -1 : item.rank(), o.length());
    } else {
      bytes = PackedBytes(rank.shards(static_cast<int>(item.index())));
    }
    REQUIRE(bytes.size() == item.bytes());
    std::string& file = files[a.hosts(0).files(item.writer())];
    if (file.size() < item.file_offset() + bytes.size())
      file.resize(item.file_offset() + bytes.size());
    file.replace(item.file_offset(), bytes.size(), bytes);
  }
  v1::NodePersistReport report;
  *report.mutable_host() = node.host();
  report.set_save_id(a.save_id());
  for (const auto& [name, contents] : files) {
    WriteFile(backend, dir + "/" + name, contents);
    report.add_files(name);
  }
  auto add = [&](const v1::StoredChunk& c) {
    v1::ChunkChecksum* sum = report.add_checksums();
    sum->set_file(c.file());
    sum->set_file_offset(c.file_offset());
    sum->set_crc32c(Crc32c(files[c.file()].data() + c.file_offset(), c.length()));
  };
  for (const v1::TensorEntry& t : a.manifest_template().tensors()) {
    for (const v1::StoredShard& s : t.shards()) {
      for (const v1::StoredChunk& c : s.chunks()) add(c);
    }
  }
  for (const v1::ObjectEntry& o : a.manifest_template().objects()) add(o.chunk());
  return report;
}

planning::SavePlannerOptions SmallChunks() {
  planning::SavePlannerOptions o;
  o.chunk_bytes = 4096;
  return o;
}

// Loads `request` through the coordinator and checks the bytes and CRCs read
// from the committed files.
void LoadAndVerify(Coordinator& coord, storage::Backend& backend, int64_t step,
                   const v1::TensorShard& request) {
  v1::NodeLoadPlan plan;
  plan.mutable_host()->set_host("h0");
  plan.set_job("job");
  plan.set_step(step);
  v1::NodeLoadPlan::RankRequests* rank = plan.add_ranks();
  rank->set_rank(0);
  *rank->add_tensors() = request;
  absl::StatusOr<v1::LoadAssignment> load = coord.PlanLoad(plan);
  CKPT_REQUIRE_OK(load);
  const std::string expected = PackedBytes(request);
  std::string got(expected.size(), '\0');
  for (const v1::ChunkRead& read : load->reads()) {
    const std::string file = ReadFile(backend, load->checkpoint_path() + "/" + read.chunk().file());
    const std::string chunk = file.substr(read.chunk().file_offset(), read.chunk().length());
    REQUIRE(chunk.size() == read.chunk().length());
    CHECK(Crc32c(chunk.data(), chunk.size()) == read.chunk().crc32c());
    for (const v1::CopyRun& run : read.runs()) {
      REQUIRE(CheckCopyRun(run, chunk.size(), got.size()).ok());
      ForEachCopy(run, [&](uint64_t src, uint64_t dst, uint64_t length) {
        got.replace(dst, length, chunk, src, length);
      });
    }
  }
  CHECK(got == expected);
}

TEST_CASE("coordinator: plan, write, report, commit, load", "[coordinator]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  const v1::NodeSavePlan node = TwoRankPlan(5);
  absl::StatusOr<v1::SaveAssignment> a = coord.PlanSave(node);
  CKPT_REQUIRE_OK(a);
  CHECK(a->save_id().rfind("job/5/", 0) == 0);
  CHECK(a->partial_dir().rfind("job/.step-5.partial-", 0) == 0);
  CHECK(a->manifest_template().created_unix_ms() > 0);
  const std::string partial = absl::StrCat(kRoot, "/", a->partial_dir());
  CHECK(Exists(*backend, partial + "/data"));
  CHECK(List(*backend, "/ckpt/job") == std::vector<std::string>{a->partial_dir().substr(4)});

  const v1::NodePersistReport report = WriteItems(*backend, *a, node);
  absl::StatusOr<v1::CommitResult> result = coord.ReportPersisted(report);
  CKPT_REQUIRE_OK(result);
  CHECK(result->step() == 5);
  CHECK(result->path() == "/ckpt/job/step-5");
  CHECK_FALSE(Exists(*backend, partial));
  CHECK(List(*backend, "/ckpt/job") == std::vector<std::string>{"LATEST", "step-5"});
  CHECK(ReadFile(*backend, "/ckpt/job/LATEST") == "5\n");

  // The committed manifest is the template with every reported CRC.
  absl::StatusOr<v1::CheckpointManifest> m = coord.catalog().ReadManifest("job", -1);
  CKPT_REQUIRE_OK(m);
  CHECK(m->step() == 5);
  std::map<std::pair<std::string, uint64_t>, uint32_t> reported;
  for (const v1::ChunkChecksum& c : report.checksums())
    reported[{c.file(), c.file_offset()}] = c.crc32c();
  v1::CheckpointManifest expected = a->manifest_template();
  for (v1::TensorEntry& t : *expected.mutable_tensors()) {
    for (v1::StoredShard& s : *t.mutable_shards()) {
      for (v1::StoredChunk& c : *s.mutable_chunks())
        c.set_crc32c(reported.at({c.file(), c.file_offset()}));
    }
  }
  for (v1::ObjectEntry& o : *expected.mutable_objects()) {
    o.mutable_chunk()->set_crc32c(reported.at({o.chunk().file(), o.chunk().file_offset()}));
  }
  CHECK(m->SerializeAsString() == expected.SerializeAsString());

  // Load it back, resharded, and check bytes and CRCs.
  LoadAndVerify(coord, *backend, 5, Whole("w", v1::FLOAT32, {64, 50}));
  LoadAndVerify(coord, *backend, -1, BoxShard("w", v1::FLOAT32, {64, 50}, {10, 7}, {40, 30}));
  LoadAndVerify(coord, *backend, 5, FlatShard("b", v1::BFLOAT16, {3000}, 1000, 2999));

  // The step is committed: planning it again is ALREADY_EXISTS.
  CKPT_REQUIRE_ERROR(coord.PlanSave(node), absl::StatusCode::kAlreadyExists,
                     "this step is already committed");
  // The save is finished: reporting it again is NOT_FOUND.
  CKPT_REQUIRE_ERROR(coord.ReportPersisted(report), absl::StatusCode::kNotFound);
}

TEST_CASE("coordinator: a step being saved cannot be planned twice", "[coordinator]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  absl::StatusOr<v1::SaveAssignment> a = coord.PlanSave(TwoRankPlan(5));
  CKPT_REQUIRE_OK(a);
  CKPT_REQUIRE_ERROR(coord.PlanSave(TwoRankPlan(5)), absl::StatusCode::kFailedPrecondition,
                     "this step is already being saved");
  CHECK(List(*backend, "/ckpt/job").size() == 1);
  // Another step can be saved meanwhile.
  absl::StatusOr<v1::SaveAssignment> b = coord.PlanSave(TwoRankPlan(6));
  CKPT_REQUIRE_OK(b);
  CHECK(b->save_id() != a->save_id());
  CHECK(List(*backend, "/ckpt/job").size() == 2);
}

TEST_CASE("coordinator: abort removes the partial directory", "[coordinator]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  const v1::NodeSavePlan node = TwoRankPlan(5);
  absl::StatusOr<v1::SaveAssignment> a = coord.PlanSave(node);
  CKPT_REQUIRE_OK(a);
  const v1::NodePersistReport report = WriteItems(*backend, *a, node);
  const std::string partial = absl::StrCat(kRoot, "/", a->partial_dir());
  REQUIRE(Exists(*backend, partial + "/data/h0-0.bin"));

  coord.AbortSave(a->save_id(), "rank 1 died");
  CHECK_FALSE(Exists(*backend, partial));
  CHECK(List(*backend, "/ckpt/job").empty());
  coord.AbortSave(a->save_id(), "again");  // idempotent
  CKPT_REQUIRE_ERROR(coord.ReportPersisted(report), absl::StatusCode::kNotFound, a->save_id());
  CHECK(List(*backend, "/ckpt/job").empty());

  // The step can be saved again from scratch.
  absl::StatusOr<v1::SaveAssignment> retry = coord.PlanSave(node);
  CKPT_REQUIRE_OK(retry);
  CKPT_REQUIRE_OK(coord.ReportPersisted(WriteItems(*backend, *retry, node)));
  CHECK(List(*backend, "/ckpt/job") == std::vector<std::string>{"LATEST", "step-5"});
}

TEST_CASE("coordinator: a report missing a checksum commits nothing", "[coordinator]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  const v1::NodeSavePlan node = TwoRankPlan(5);
  absl::StatusOr<v1::SaveAssignment> a = coord.PlanSave(node);
  CKPT_REQUIRE_OK(a);
  v1::NodePersistReport report = WriteItems(*backend, *a, node);
  REQUIRE(report.checksums_size() > 3);
  const v1::ChunkChecksum dropped = report.checksums(2);
  report.mutable_checksums()->DeleteSubrange(2, 1);

  CKPT_REQUIRE_ERROR(coord.ReportPersisted(report), absl::StatusCode::kInternal,
                     "no checksum reported for " + dropped.file(),
                     "offset " + std::to_string(dropped.file_offset()));
  CHECK_FALSE(Exists(*backend, "/ckpt/job/step-5"));
  CHECK_FALSE(Exists(*backend, "/ckpt/job/LATEST"));
  CHECK(List(*backend, "/ckpt/job").empty());  // the partial directory is gone too
  // The save was aborted: the full report is now too late.
  *report.add_checksums() = dropped;
  CKPT_REQUIRE_ERROR(coord.ReportPersisted(report), absl::StatusCode::kNotFound);
  CKPT_REQUIRE_ERROR(coord.catalog().ResolveStep("job", -1), absl::StatusCode::kNotFound);
}

TEST_CASE("coordinator: invalid plans create no directory", "[coordinator]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  Coordinator coord(*backend, kRoot, SmallChunks());
  v1::NodeSavePlan node = TwoRankPlan(5);
  node.set_job("../x");
  CKPT_REQUIRE_ERROR(coord.PlanSave(node), absl::StatusCode::kInvalidArgument);
  node = TwoRankPlan(5);
  AddShard(node, 1, Whole("w", v1::FLOAT16, {64, 50}));
  CKPT_REQUIRE_ERROR(coord.PlanSave(node), absl::StatusCode::kInvalidArgument, "tensor w");
  CHECK_FALSE(Exists(*backend, "/ckpt/job"));
  CHECK_FALSE(Exists(*backend, "/x"));
}

// ---------------------------------------------------------------------------
// Storage faults during commit

// Logs every mutating call (and file syncs) in order; SyncDir of one chosen
// path fails. Everything else goes to the target.
class RecordingBackend : public storage::Backend {
 public:
  explicit RecordingBackend(storage::Backend& target) : target_(target) {}

  std::vector<std::string> log;
  std::string fail_sync_dir;   // SyncDir of exactly this path fails,
  int fail_sync_dir_from = 1;  // from its n-th call on

  std::string Name() const override { return "recording(" + target_.Name() + ")"; }
  absl::StatusOr<std::unique_ptr<storage::WritableFile>> NewWritableFile(
      const std::string& path) override {
    log.push_back("open " + path);
    absl::StatusOr<std::unique_ptr<storage::WritableFile>> file = target_.NewWritableFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<storage::WritableFile>(new File(*this, path, *std::move(file)));
  }
  absl::StatusOr<std::unique_ptr<storage::ReadableFile>> NewReadableFile(
      const std::string& path) override {
    return target_.NewReadableFile(path);
  }
  absl::Status CreateDirs(const std::string& path) override {
    log.push_back("mkdir " + path);
    return target_.CreateDirs(path);
  }
  absl::Status SyncDir(const std::string& path) override {
    log.push_back("syncdir " + path);
    if (path == fail_sync_dir && ++sync_dir_calls_ >= fail_sync_dir_from) {
      return absl::UnknownError("fsync directory " + path + ": Input/output error");
    }
    return target_.SyncDir(path);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    log.push_back("rename " + from + " " + to);
    return target_.Rename(from, to);
  }
  absl::Status RemoveAll(const std::string& path) override {
    log.push_back("remove " + path);
    return target_.RemoveAll(path);
  }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    return target_.ListDir(path);
  }
  absl::StatusOr<bool> Exists(const std::string& path) override {
    log.push_back("exists " + path);
    return target_.Exists(path);
  }

 private:
  class File : public storage::WritableFile {
   public:
    File(RecordingBackend& owner, std::string path, std::unique_ptr<storage::WritableFile> file)
        : owner_(owner), path_(std::move(path)), file_(std::move(file)) {}
    absl::Status WriteAt(uint64_t offset, const void* data, size_t length) override {
      owner_.log.push_back("write " + path_);
      return file_->WriteAt(offset, data, length);
    }
    absl::Status Sync() override {
      owner_.log.push_back("sync " + path_);
      return file_->Sync();
    }
    absl::Status Close() override {
      owner_.log.push_back("close " + path_);
      return file_->Close();
    }

   private:
    RecordingBackend& owner_;
    const std::string path_;
    std::unique_ptr<storage::WritableFile> file_;
  };

  storage::Backend& target_;
  int sync_dir_calls_ = 0;
};

TEST_CASE("commit follows the protocol, step by step", "[commit]") {
  std::unique_ptr<storage::Backend> inner = storage::NewMemoryBackend();
  const std::string p = MakePartial(*inner, "job", 7, "abc", "hello");
  RecordingBackend recording(*inner);
  CKPT_REQUIRE_OK(CommitCheckpoint(recording, kRoot, p, ManifestFor("job", 7, 1)));
  CHECK(recording.log == std::vector<std::string>{
                             // No LATEST.next of an earlier commit to fold in,
                             "exists /ckpt/job/LATEST.next",
                             // the data files' entries durable,
                             "syncdir " + p + "/data",
                             // MANIFEST durable in the partial directory, and its entry too,
                             "open " + p + "/MANIFEST",
                             "write " + p + "/MANIFEST",
                             "sync " + p + "/MANIFEST",
                             "close " + p + "/MANIFEST",
                             "syncdir " + p,
                             // the intent to make step 7 latest, durable before it is visible,
                             "exists /ckpt/job/step-7",
                             "open /ckpt/job/LATEST.next",
                             "write /ckpt/job/LATEST.next",
                             "sync /ckpt/job/LATEST.next",
                             "close /ckpt/job/LATEST.next",
                             "syncdir /ckpt/job",
                             // then the atomic rename, made durable: the commit point,
                             "rename " + p + " /ckpt/job/step-7",
                             "syncdir /ckpt/job",
                             // then LATEST, tmp -> fsync -> rename -> fsync dir.
                             "open /ckpt/job/LATEST.tmp",
                             "write /ckpt/job/LATEST.tmp",
                             "sync /ckpt/job/LATEST.tmp",
                             "close /ckpt/job/LATEST.tmp",
                             "rename /ckpt/job/LATEST.tmp /ckpt/job/LATEST",
                             "syncdir /ckpt/job",
                             // and the intent is spent.
                             "remove /ckpt/job/LATEST.next",
                         });
}

TEST_CASE("commit faults: a failed fsync leaves no step visible", "[commit][fault]") {
  std::unique_ptr<storage::Backend> inner = storage::NewMemoryBackend();
  storage::FaultInjectionBackend faulty(inner.get());
  Coordinator coord(faulty, kRoot, SmallChunks());
  const v1::NodeSavePlan node = TwoRankPlan(5);
  absl::StatusOr<v1::SaveAssignment> a = coord.PlanSave(node);
  CKPT_REQUIRE_OK(a);
  const v1::NodePersistReport report = WriteItems(faulty, *a, node);

  SECTION("directory fsync fails") {
    faulty.FailSyncDirs(true);
    CKPT_REQUIRE_ERROR(coord.ReportPersisted(report), absl::StatusCode::kUnknown,
                       "commit: ", "injected fault");
  }
  SECTION("MANIFEST fsync fails") {
    faulty.FailNthSync(1);
    CKPT_REQUIRE_ERROR(coord.ReportPersisted(report), absl::StatusCode::kUnknown,
                       "commit: ", "MANIFEST", "injected fault");
  }
  CHECK_FALSE(Exists(*inner, "/ckpt/job/step-5"));
  CHECK_FALSE(Exists(*inner, "/ckpt/job/LATEST"));
  CHECK(List(*inner, "/ckpt/job").empty());
  CKPT_REQUIRE_ERROR(coord.catalog().ResolveStep("job", -1), absl::StatusCode::kNotFound);

  // Once storage recovers, the same step saves normally.
  faulty.ClearFaults();
  absl::StatusOr<v1::SaveAssignment> retry = coord.PlanSave(node);
  CKPT_REQUIRE_OK(retry);
  CKPT_REQUIRE_OK(coord.ReportPersisted(WriteItems(faulty, *retry, node)));
  CHECK(List(*inner, "/ckpt/job") == std::vector<std::string>{"LATEST", "step-5"});
}

TEST_CASE("commit faults: a failed fsync of the job directory after the rename",
          "[commit][fault]") {
  // The rename happened but was not made durable: the commit reports failure,
  // so step-N must not stay visible (load-latest would pick a save its
  // trainer was told had failed, and a retry would be ALREADY_EXISTS).
  std::unique_ptr<storage::Backend> inner = storage::NewMemoryBackend();
  RecordingBackend faulty(*inner);
  faulty.fail_sync_dir = "/ckpt/job";
  faulty.fail_sync_dir_from = 2;  // the first makes LATEST.next durable, the second the rename
  Coordinator coord(faulty, kRoot, SmallChunks());
  const v1::NodeSavePlan node = TwoRankPlan(5);
  absl::StatusOr<v1::SaveAssignment> a = coord.PlanSave(node);
  CKPT_REQUIRE_OK(a);
  const absl::StatusOr<v1::CommitResult> result =
      coord.ReportPersisted(WriteItems(*inner, *a, node));
  CKPT_REQUIRE_ERROR(result, absl::StatusCode::kUnknown, "commit: ", "/ckpt/job");
  CHECK(std::find(faulty.log.begin(), faulty.log.end(),
                  "rename /ckpt/job/step-5 " + absl::StrCat(kRoot, "/", a->partial_dir())) !=
        faulty.log.end());  // the failure really came after the rename, which was undone
  CHECK_FALSE(Exists(*inner, "/ckpt/job/step-5"));
  CHECK_FALSE(Exists(*inner, "/ckpt/job/LATEST"));
  CHECK(List(*inner, "/ckpt/job").empty());
  absl::StatusOr<std::vector<int64_t>> steps = coord.catalog().ListSteps("job");
  CKPT_REQUIRE_OK(steps);
  CHECK(steps->empty());
  // A retry of the same step is not refused once storage recovers.
  faulty.fail_sync_dir.clear();
  absl::StatusOr<v1::SaveAssignment> retry = coord.PlanSave(node);
  CKPT_REQUIRE_OK(retry);
  CKPT_REQUIRE_OK(coord.ReportPersisted(WriteItems(*inner, *retry, node)));
  CHECK(List(*inner, "/ckpt/job") == std::vector<std::string>{"LATEST", "step-5"});
}

}  // namespace
}  // namespace ckpt::coordinator

namespace ckpt::coordinator {
namespace {

TEST_CASE("coordinator: a deposed leader's commit is fenced by a newer leader's epoch",
          "[coordinator][epoch_fence]") {
  std::unique_ptr<storage::Backend> backend = storage::NewMemoryBackend();
  // Two coordinators over one store, as after a failover: the old leader
  // (epoch 5) was paused; the new one (epoch 8) leads.
  Coordinator old_leader(*backend, kRoot, SmallChunks());
  Coordinator new_leader(*backend, kRoot, SmallChunks());
  bool old_leads = true;
  old_leader.FenceCommits({.epoch = [] { return int64_t{5}; },
                           .still_leading = [&]() -> absl::Status {
                             if (old_leads) return absl::OkStatus();
                             return absl::FailedPreconditionError("its lease lapsed");
                           }});
  new_leader.FenceCommits({.epoch = [] { return int64_t{8}; }, .still_leading = nullptr});

  // The old leader commits step 1 under epoch 5.
  absl::StatusOr<v1::SaveAssignment> a = old_leader.PlanSave(TwoRankPlan(1));
  CKPT_REQUIRE_OK(a);
  CKPT_REQUIRE_OK(old_leader.ReportPersisted(WriteItems(*backend, *a, TwoRankPlan(1))));
  CHECK(ReadFile(*backend, "/ckpt/job/EPOCH") == "5\n");

  // It plans step 2 and pauses; the new leader commits step 3.
  absl::StatusOr<v1::SaveAssignment> stale = old_leader.PlanSave(TwoRankPlan(2));
  CKPT_REQUIRE_OK(stale);
  const v1::NodePersistReport stale_report = WriteItems(*backend, *stale, TwoRankPlan(2));
  absl::StatusOr<v1::SaveAssignment> b = new_leader.PlanSave(TwoRankPlan(3));
  CKPT_REQUIRE_OK(b);
  CKPT_REQUIRE_OK(new_leader.ReportPersisted(WriteItems(*backend, *b, TwoRankPlan(3))));
  CHECK(ReadFile(*backend, "/ckpt/job/EPOCH") == "8\n");

  // Resumed, the old leader's commit of step 2 is refused and counted;
  // step 3 stays latest and step 2 never appears.
  CKPT_REQUIRE_ERROR(old_leader.ReportPersisted(stale_report),
                     absl::StatusCode::kFailedPrecondition, "commit fenced");
  CHECK(old_leader.fenced_commits() == 1);
  CHECK(new_leader.fenced_commits() == 0);
  CHECK(ReadFile(*backend, "/ckpt/job/LATEST") == "3\n");
  absl::StatusOr<std::vector<int64_t>> steps = new_leader.catalog().ListSteps("job");
  CKPT_REQUIRE_OK(steps);
  CHECK(*steps == std::vector<int64_t>{1, 3});

  // A leader that lost its lease is refused at the commit point even when
  // no newer epoch has committed yet.
  Coordinator other(*backend, kRoot, SmallChunks());
  other.FenceCommits(
      {.epoch = [] { return int64_t{9}; },
       .still_leading = [] { return absl::FailedPreconditionError("its etcd lease expired"); }});
  absl::StatusOr<v1::SaveAssignment> c = other.PlanSave(TwoRankPlan(4));
  CKPT_REQUIRE_OK(c);
  CKPT_REQUIRE_ERROR(other.ReportPersisted(WriteItems(*backend, *c, TwoRankPlan(4))),
                     absl::StatusCode::kFailedPrecondition, "its etcd lease expired");
  CHECK(other.fenced_commits() == 1);
  CHECK(ReadFile(*backend, "/ckpt/job/EPOCH") == "8\n");  // not advanced by a refused term
  old_leads = false;
}

}  // namespace
}  // namespace ckpt::coordinator
