// What the fuzz targets share: the daemon's defaults, the handler path from
// requests to plans as NodeService, SaveSession and LoadSession run it (the
// pure part, without sessions, pool or I/O), and checks that every plan the
// daemon accepts keeps the copies it describes inside the memory they name.
//
// A broken check aborts, which libFuzzer reports as a crash with the input
// that caused it; an error Status is the daemon refusing a request, which is
// fine.
#ifndef CKPT_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define CKPT_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/manifest.pb.h"
#include "ckpt/v1/node.pb.h"
#include "daemon/planning/save_planner.h"
#include "tests/fuzz/fuzz_cases.pb.h"

namespace ckpt::fuzz {

// Prints the broken invariant and aborts.
[[noreturn]] void Fail(const char* file, int line, const char* condition, const std::string& why);
#define CKPT_FUZZ_CHECK(condition, why)                                        \
  do {                                                                         \
    if (!(condition)) ::ckpt::fuzz::Fail(__FILE__, __LINE__, #condition, why); \
  } while (0)

// Once per process (LLVMFuzzerInitialize): silences protobuf's log, which
// reports every malformed string in an input and slows the run.
void Init();

// ckptd's defaults (daemon_options.h, node_daemon.cc).
inline constexpr uint64_t kChunkBytes = 4 << 20;
inline constexpr uint64_t kBatchBytes = 32 << 20;
inline constexpr uint64_t kPoolAlignment = 4096;
inline constexpr int kWriterThreads = 4;
// The planner's options as ckptd sets them by default, but for
// --max_chunks_per_save: a plan's cost is linear in its chunks up to that
// bound (4 Mi chunks by default, seconds and gigabytes under ASan), so the
// fuzzers hold it to 4096 and spend their time on inputs that differ in
// kind, not in size.
planning::SavePlannerOptions DaemonPlannerOptions();

// Worlds larger than this are skipped: a bigger world only repeats ranks,
// and each input should stay fast.
inline constexpr int kMaxFuzzWorld = 16;

// The save of `save`: each rank's AttachRequest and PlanSaveRequest checked
// as NodeService does, then every rank's plan batched (BatchRankPlans) and
// planned together as SaveSession::PlanAllRanks does. Every rank takes the
// first rank's step (a different step would be another save). An error is
// the daemon's answer to a rank. `requests` receives the ranks' requests.
absl::StatusOr<v1::SaveAssignment> PlanSaveCase(const SaveCase& save,
                                                std::vector<v1::PlanSaveRequest>* requests);

// Checks an accepted save: the manifest its commit writes reads back and
// validates (else the checkpoint would be unloadable), items do not overlap
// in their files, and each rank's items (SplitByRank) stream through the
// pool in batches (NextBatchLayout) that stay inside the items and their
// room. Returns the manifest as the catalog reads it back.
v1::CheckpointManifest CheckSaveAssignment(const v1::SaveAssignment& assignment,
                                           const std::vector<v1::PlanSaveRequest>& requests);

// The load of `manifest` by `ranks` (index = rank): each LoadRequest checked
// as NodeService does, then planned as LoadSession::Plan does.
absl::StatusOr<v1::LoadAssignment> PlanLoadRequests(const v1::CheckpointManifest& manifest,
                                                    const std::vector<v1::LoadRequest>& ranks);

// Checks an accepted load: every run stays inside its chunk and its
// request's bytes, and the pool groups the daemon reads (GroupLoadReads)
// hand out deliveries that stay inside the chunk they copy from and the
// buffer they copy to.
void CheckLoadAssignment(const v1::LoadAssignment& assignment,
                         const std::vector<v1::LoadRequest>& ranks);

}  // namespace ckpt::fuzz

#endif  // CKPT_TESTS_FUZZ_FUZZ_SUPPORT_H_
