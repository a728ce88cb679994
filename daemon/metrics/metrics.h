// ckptd's Prometheus metrics and per-event log lines, behind one small
// interface: the sessions report their events (a save or load ended, bytes
// moved, an I/O error, a refused call) and the daemon provides a sampler for
// what is read at scrape time (pool, writer queue, checkpoints on disk).
// prometheus-cpp's registry is the store; MetricsServer serves it over HTTP.
// docs/operations.md ("Metrics and log lines") lists every metric.
//
// Per-job series carry a ckpt_job label of bounded cardinality (JobLabels).
// Not "job": Prometheus gives every scraped series job=<scrape job>, and
// renames a target's own job label to exported_job.
// Stage durations are observed for saves and loads that succeeded: a failed
// one's stages did not all run, and its outcome is in the counters and the
// log line.
//
// Thread-safety: safe from any thread.
#ifndef CKPT_DAEMON_METRICS_METRICS_H_
#define CKPT_DAEMON_METRICS_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/metrics/event_log.h"
#include "daemon/metrics/job_costs.h"
#include "daemon/metrics/job_labels.h"

namespace prometheus {
class Collectable;
class Counter;
class Registry;
}  // namespace prometheus

namespace ckpt::metrics {

// A save's stages (docs/design.md §4). plan: first rank's request to the
// assignment (the barrier included); snapshot: assignment to every rank's
// last batch submitted; write: assignment to the last chunk written
// (overlaps snapshot); fsync: syncing the data files; commit: manifest,
// rename, LATEST.
struct SaveStages {
  absl::Duration plan, snapshot, write, fsync, commit;
};

struct SaveReport {
  std::string job;
  int64_t step = 0;
  absl::Status status;        // OK: committed
  uint64_t bytes = 0;         // payload written
  uint64_t stored_bytes = 0;  // of it, as the codec stored it (bytes when raw)
  std::string codec;          // the save's ("none", "zstd", "grouped-zstd")
  absl::Duration duration;    // first rank's request to commit or clean-up
  SaveStages stages;          // observed only when status is OK
};

// A load's stages (docs/design.md §5). plan: first rank's request to the plan;
// read and verify: the reader threads' time in I/O and in CRC checks,
// summed over threads; deliver: device copies by the daemon plus the time
// ranks held their batches (their copies out of the pool), summed.
struct LoadStages {
  absl::Duration plan, read, verify, deliver;
};

// Bytes a load delivered to its ranks on this host from one source
// (node.proto LoadSource): kind "memory", "storage", "peer" or "parity", and
// the host that read or rebuilt them.
struct LoadSourceBytes {
  std::string kind;
  std::string host;
  uint64_t bytes = 0;
};

struct LoadReport {
  std::string job;
  int64_t step = -1;  // -1: latest, not resolved (the load failed first)
  absl::Status status;
  uint64_t bytes = 0;            // read from storage (or the memory tier: tier)
  std::string tier;              // "memory" or "durable"; empty before it is planned
  uint64_t fallback_chunks = 0;  // failed verification in memory, read from storage
  // Where the bytes delivered to the ranks came from (summed over this
  // host's ranks that completed; their sum is the bytes delivered).
  std::vector<LoadSourceBytes> sources;
  absl::Duration duration;
  LoadStages stages;  // observed only when status is OK
};

// What the daemon's parts say at scrape time.
// Requests to the storage server (storage::RequestCounts, sampled by the
// service: metrics sits below storage).
struct StorageRequests {
  std::string backend;  // the label: "s3"
  uint64_t requests = 0;
  uint64_t retries = 0;
  uint64_t throttles = 0;
  uint64_t failures = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

struct NodeSample {
  uint64_t pool_capacity_bytes = 0;
  uint64_t pool_used_bytes = 0;
  int pool_waiters = 0;
  absl::Duration pool_stall;  // summed over every wait since start
  uint64_t pool_segment_renewals = 0;
  uint64_t save_plan_cache_hits = 0;    // saves planned from the plan cache
  uint64_t save_plan_cache_misses = 0;  // saves planned afresh
  uint64_t writer_queue_chunks = 0;
  int attached_ranks = 0;
  std::map<std::string, int64_t> checkpoints;  // committed steps on disk, by job
  // The memory tier (all 0 without one).
  uint64_t memory_tier_budget_bytes = 0;
  uint64_t memory_tier_bytes = 0;
  std::map<std::string, int64_t> memory_tier_steps;  // committed steps in memory, by job
  uint64_t memory_bytes_read = 0;
  uint64_t memory_persists = 0;
  uint64_t memory_persist_failures = 0;
  // Requests to the storage server (an object store); absent on a filesystem.
  std::optional<StorageRequests> storage_requests;
  // A coordinator campaigning through etcd (docs/failover.md); absent else.
  struct Election {
    bool leading = false;
    int64_t epoch = 0;
    uint64_t elections_won = 0;
    uint64_t leases_lost = 0;
    uint64_t fenced_commits = 0;
  };
  std::optional<Election> election;
};

enum class IoOp { kWrite, kSync, kRead };

struct MetricsOptions {
  int max_jobs = 50;        // JobLabels
  EventLog::Sink log_sink;  // default: stderr
  int refusals_logged_per_second = 10;
};

// "ok", "aborted" (cancelled, a rank gone, a deadline, shutdown: stopped
// from outside) or "failed" (anything else: storage, bad input, no room).
const char* OutcomeOf(const absl::Status& status);
// Refusal codes: the call was turned away for what it asked or who asked.
bool IsRefusal(absl::StatusCode code);

class Metrics {
 public:
  explicit Metrics(MetricsOptions options = {});
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The job's byte counters, to add to as bytes move; stable for the
  // Metrics' life, so a session looks them up once.
  prometheus::Counter& WrittenBytes(const std::string& job);
  prometheus::Counter& ReadBytes(const std::string& job);

  // Counts, observes and logs the end of a save or a load (one line each).
  void SaveEnded(const SaveReport& report);
  void LoadEnded(const LoadReport& report);
  // A call answered with a refusal code (IsRefusal); others are ignored.
  // `method` is the gRPC method's name; the line is rate-limited.
  void Refused(absl::string_view method, absl::StatusCode code, absl::string_view message,
               absl::string_view peer);
  void IoError(IoOp op);
  // A chunk of the job's load failed verification in one tier and was read
  // from the next.
  void LoadFallback(const std::string& job);
  // This host rebuilt `lost_host`'s data files of the job's step from the
  // parity shares of the others (`bytes`: the lost shares' bytes), for a
  // load: counted, and logged naming the files.
  void ParityRebuilt(const std::string& job, int64_t step, const std::string& lost_host,
                     const std::vector<std::string>& files, uint64_t bytes);
  // Periodic: reports suppressed refusal lines.
  void Tick(absl::Time now);

  // Each job's checkpoint cost, from its committed saves (SaveEnded).
  const JobCosts& job_costs() const { return costs_; }

  // Read at every scrape; nullptr: none (the gauges read 0). Setting it
  // waits for a scrape in progress, so the daemon can clear it before its
  // parts go.
  void SetSampler(std::function<NodeSample()> sampler);

  // What /metrics serves, and the same in Prometheus' text format.
  std::vector<std::weak_ptr<prometheus::Collectable>> Collectables() const;
  std::string TextFormat() const;

 private:
  struct Families;
  class Sampled;

  const absl::Time started_;
  JobLabels jobs_;
  JobCosts costs_;
  EventLog log_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  std::shared_ptr<Sampled> sampled_;
};

}  // namespace ckpt::metrics

#endif  // CKPT_DAEMON_METRICS_METRICS_H_
