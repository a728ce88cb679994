#include "daemon/metrics/metrics.h"

#include <algorithm>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/metrics/build_info.h"

namespace ckpt::metrics {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// Checkpoint stages take from milliseconds (a commit) to many minutes (a
// terabyte's write); few buckets, since each is a series per job and stage.
const Histogram::BucketBoundaries& StageBuckets() {
  static const Histogram::BucketBoundaries buckets = {0.005, 0.025, 0.1, 0.25, 1,   2.5,
                                                      10,    30,    60,  300,  1800};
  return buckets;
}

const char* IoOpName(IoOp op) {
  switch (op) {
    case IoOp::kWrite:
      return "write";
    case IoOp::kSync:
      return "sync";
    case IoOp::kRead:
      return "read";
  }
  return "unknown";
}

// A gRPC method's short name ("/ckpt.v1.NodeService/PlanSave" -> "PlanSave"),
// or "_other" for anything that is not a plain identifier: label values
// must stay few and printable.
std::string MethodLabel(absl::string_view method) {
  const size_t slash = method.rfind('/');
  if (slash != absl::string_view::npos) method = method.substr(slash + 1);
  const bool plain = !method.empty() && method.size() <= 64 &&
                     std::all_of(method.begin(), method.end(), [](char c) {
                       return absl::ascii_isalnum(static_cast<unsigned char>(c));
                     });
  return plain ? std::string(method) : std::string(kOtherJobs);
}

std::string StepText(int64_t step) { return step < 0 ? std::string("latest") : absl::StrCat(step); }

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

const char* OutcomeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return "ok";
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnavailable:
      return "aborted";
    default:
      return "failed";
  }
}

bool IsRefusal(absl::StatusCode code) {
  return code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kPermissionDenied || code == absl::StatusCode::kUnauthenticated;
}

struct Metrics::Families {
  explicit Families(prometheus::Registry& r)
      : saves(prometheus::BuildCounter()
                  .Name("ckpt_saves_total")
                  .Help("Saves that ended, by job, outcome (ok, aborted, failed) and status code")
                  .Register(r)),
        loads(prometheus::BuildCounter()
                  .Name("ckpt_loads_total")
                  .Help("Loads that ended, by job, outcome (ok, aborted, failed) and status code")
                  .Register(r)),
        save_duration(prometheus::BuildHistogram()
                          .Name("ckpt_save_duration_seconds")
                          .Help("Committed saves: first rank's request to commit")
                          .Register(r)),
        save_stages(prometheus::BuildHistogram()
                        .Name("ckpt_save_stage_duration_seconds")
                        .Help("Committed saves, per stage: plan, snapshot, write (overlaps "
                              "snapshot), fsync, commit")
                        .Register(r)),
        load_duration(prometheus::BuildHistogram()
                          .Name("ckpt_load_duration_seconds")
                          .Help("Completed loads: first rank's request to the last rank done")
                          .Register(r)),
        load_stages(prometheus::BuildHistogram()
                        .Name("ckpt_load_stage_duration_seconds")
                        .Help("Completed loads, per stage: plan; read, verify, deliver (summed "
                              "over threads and ranks)")
                        .Register(r)),
        written(prometheus::BuildCounter()
                    .Name("ckpt_written_bytes_total")
                    .Help("Checkpoint payload bytes written to storage, by job")
                    .Register(r)),
        read(prometheus::BuildCounter()
                 .Name("ckpt_read_bytes_total")
                 .Help("Bytes read from storage by loads, by job")
                 .Register(r)),
        last_commit(prometheus::BuildGauge()
                        .Name("ckpt_last_commit_timestamp_seconds")
                        .Help("Unix time of the job's last commit by this daemon")
                        .Register(r)),
        load_fallbacks(prometheus::BuildCounter()
                           .Name("ckpt_load_fallback_chunks_total")
                           .Help("Chunks that failed verification in the memory tier and were "
                                 "read from storage instead, by job")
                           .Register(r)),
        load_sources(prometheus::BuildCounter()
                         .Name("ckpt_load_bytes_total")
                         .Help("Bytes completed loads delivered to their ranks, by job, source "
                               "(memory, storage, peer, parity) and the host that read or "
                               "rebuilt them")
                         .Register(r)),
        parity_rebuilds(prometheus::BuildCounter()
                            .Name("ckpt_parity_rebuilds_total")
                            .Help("A lost host's data files of a memory-tier step rebuilt here "
                                  "from parity for a load, by job")
                            .Register(r)),
        parity_rebuilt_bytes(prometheus::BuildCounter()
                                 .Name("ckpt_parity_rebuilt_bytes_total")
                                 .Help("Bytes of lost data shares rebuilt here from parity, by job")
                                 .Register(r)),
        io_errors(prometheus::BuildCounter()
                      .Name("ckpt_io_errors_total")
                      .Help("Storage operations that failed: write, sync (data files) or read "
                            "(including checksum mismatches)")
                      .Register(r)),
        refusals(prometheus::BuildCounter()
                     .Name("ckpt_refusals_total")
                     .Help("Calls refused (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, "
                           "PERMISSION_DENIED, UNAUTHENTICATED), by method and code")
                     .Register(r)) {
    // Present (at 0) from the start, so alerts on them have a series.
    for (IoOp op : {IoOp::kWrite, IoOp::kSync, IoOp::kRead}) io_errors.Add({{"op", IoOpName(op)}});
  }

  Family<Counter>& saves;
  Family<Counter>& loads;
  Family<Histogram>& save_duration;
  Family<Histogram>& save_stages;
  Family<Histogram>& load_duration;
  Family<Histogram>& load_stages;
  Family<Counter>& written;
  Family<Counter>& read;
  Family<Gauge>& last_commit;
  Family<Counter>& load_fallbacks;
  Family<Counter>& load_sources;
  Family<Counter>& parity_rebuilds;
  Family<Counter>& parity_rebuilt_bytes;
  Family<Counter>& io_errors;
  Family<Counter>& refusals;
};

// The metrics read from the daemon at scrape time, plus the constant ones
// (up, build info, start time).
class Metrics::Sampled : public prometheus::Collectable {
 public:
  Sampled(JobLabels& jobs, absl::Time started) : jobs_(jobs), started_(started) {}

  void Set(std::function<NodeSample()> sampler) {
    absl::MutexLock lock(&mu_);
    sampler_ = std::move(sampler);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    NodeSample s;
    {
      absl::MutexLock lock(&mu_);
      if (sampler_) s = sampler_();
    }
    std::vector<prometheus::MetricFamily> out;
    auto gauge = [&](const char* name, const char* help, double value,
                     std::vector<prometheus::ClientMetric::Label> labels = {}) {
      prometheus::MetricFamily& f = out.emplace_back();
      f.name = name;
      f.help = help;
      f.type = prometheus::MetricType::Gauge;
      prometheus::ClientMetric& m = f.metric.emplace_back();
      m.label = std::move(labels);
      m.gauge.value = value;
    };
    gauge("ckpt_up", "1 while ckptd serves", 1);
    gauge("ckpt_build_info", "ckptd's version and the commit it was built from (always 1)", 1,
          {{"revision", kGitRevision}, {"version", kVersion}});
    gauge("ckpt_start_time_seconds", "Unix time ckptd started",
          absl::ToDoubleSeconds(started_ - absl::UnixEpoch()));
    gauge("ckpt_pool_capacity_bytes", "Pinned staging pool size (--pool_bytes)",
          static_cast<double>(s.pool_capacity_bytes));
    gauge("ckpt_pool_used_bytes", "Pool bytes allocated to saves and loads in flight",
          static_cast<double>(s.pool_used_bytes));
    gauge("ckpt_pool_waiters", "Allocations waiting for pool room now", s.pool_waiters);
    {
      prometheus::MetricFamily& f = out.emplace_back();
      f.name = "ckpt_pool_stall_seconds_total";
      f.help = "Time allocations spent waiting for pool room (backpressure), summed";
      f.type = prometheus::MetricType::Counter;
      f.metric.emplace_back().counter.value = Seconds(s.pool_stall);
    }
    {
      prometheus::MetricFamily& f = out.emplace_back();
      f.name = "ckpt_pool_segment_renewals_total";
      f.help = "Pool segments given fresh memory to pass from one job to another";
      f.type = prometheus::MetricType::Counter;
      f.metric.emplace_back().counter.value = static_cast<double>(s.pool_segment_renewals);
    }
    {
      prometheus::MetricFamily& f = out.emplace_back();
      f.name = "ckpt_save_plans_total";
      f.help =
          "Save plans by source: the plan cache (the job's layout unchanged) or planned afresh";
      f.type = prometheus::MetricType::Counter;
      for (const auto& [source, value] :
           {std::pair<const char*, uint64_t>{"cache", s.save_plan_cache_hits},
            std::pair<const char*, uint64_t>{"planned", s.save_plan_cache_misses}}) {
        prometheus::ClientMetric& m = f.metric.emplace_back();
        m.label.push_back({"source", source});
        m.counter.value = static_cast<double>(value);
      }
    }
    gauge("ckpt_writer_queue_chunks", "Chunks queued to the writer threads, not yet written",
          static_cast<double>(s.writer_queue_chunks));
    gauge("ckpt_attached_ranks", "Ranks attached to this daemon", s.attached_ranks);
    // Only with a memory tier: a daemon without one has nothing to say.
    if (s.memory_tier_budget_bytes > 0) AddMemoryTier(s, out);
    if (s.storage_requests.has_value()) AddStorageRequests(*s.storage_requests, out);
    if (s.election.has_value()) {
      gauge("ckpt_coordinator_leader",
            "1 while this coordinator leads (etcd election), 0 while it stands by",
            s.election->leading ? 1 : 0);
      gauge("ckpt_coordinator_epoch", "The epoch of this coordinator's current or last term",
            static_cast<double>(s.election->epoch));
      for (const auto& [name, help, value] :
           {std::tuple<const char*, const char*, uint64_t>{"ckpt_coordinator_elections_won_total",
                                                           "Terms this coordinator won",
                                                           s.election->elections_won},
            {"ckpt_coordinator_leases_lost_total",
             "Terms that ended without a resignation (the etcd lease lapsed or could not be "
             "renewed)",
             s.election->leases_lost},
            {"ckpt_coordinator_fenced_commits_total",
             "Commits refused because a newer leader's epoch had committed, or this "
             "coordinator no longer led",
             s.election->fenced_commits}}) {
        prometheus::MetricFamily& f = out.emplace_back();
        f.name = name;
        f.help = help;
        f.type = prometheus::MetricType::Counter;
        f.metric.emplace_back().counter.value = static_cast<double>(value);
      }
    }
    std::map<std::string, int64_t> by_label;
    for (const auto& [job, count] : s.checkpoints) by_label[jobs_.ExistingLabel(job)] += count;
    prometheus::MetricFamily& f = out.emplace_back();
    f.name = "ckpt_checkpoints";
    f.help =
        "Committed checkpoints (step directories) on disk, by job; jobs not saved or "
        "loaded since ckptd started count under _other";
    f.type = prometheus::MetricType::Gauge;
    for (const auto& [label, count] : by_label) {
      prometheus::ClientMetric& m = f.metric.emplace_back();
      m.label = {{"ckpt_job", label}};
      m.gauge.value = static_cast<double>(count);
    }
    return out;
  }

 private:
  // Requests to an object store (daemon/storage/s3): how many, how many
  // were retried or throttled, how many gave up, and the bytes moved.
  static void AddStorageRequests(const StorageRequests& c,
                                 std::vector<prometheus::MetricFamily>& out) {
    auto counter = [&](const char* name, const char* help, uint64_t value,
                       std::vector<prometheus::ClientMetric::Label> labels = {}) {
      prometheus::MetricFamily* f = nullptr;
      for (prometheus::MetricFamily& existing : out) {
        if (existing.name == name) f = &existing;
      }
      if (f == nullptr) {
        f = &out.emplace_back();
        f->name = name;
        f->help = help;
        f->type = prometheus::MetricType::Counter;
      }
      prometheus::ClientMetric& m = f->metric.emplace_back();
      m.label = {{"backend", c.backend}};
      for (auto& l : labels) m.label.push_back(std::move(l));
      m.counter.value = static_cast<double>(value);
    };
    counter("ckpt_storage_requests_total", "Requests sent to the storage server, retries included",
            c.requests);
    counter("ckpt_storage_request_retries_total",
            "Requests sent again after a 5xx, a throttle, a reset or a timeout", c.retries);
    counter("ckpt_storage_throttles_total",
            "Answers asking to slow down (503 SlowDown, 429, Throttling)", c.throttles);
    counter("ckpt_storage_request_failures_total",
            "Requests that gave up (retries or the deadline exhausted)", c.failures);
    const char* bytes_help = "Bytes of request and response bodies moved to and from the server";
    counter("ckpt_storage_transfer_bytes_total", bytes_help, c.bytes_sent, {{"direction", "sent"}});
    counter("ckpt_storage_transfer_bytes_total", bytes_help, c.bytes_received,
            {{"direction", "received"}});
  }

  // The memory tier's gauges and counters (daemon/tier/memory_tier.h).
  void AddMemoryTier(const NodeSample& s, std::vector<prometheus::MetricFamily>& out) const {
    auto gauge = [&](const char* name, const char* help, double value) {
      prometheus::MetricFamily& f = out.emplace_back();
      f.name = name;
      f.help = help;
      f.type = prometheus::MetricType::Gauge;
      f.metric.emplace_back().gauge.value = value;
    };
    gauge("ckpt_memory_tier_budget_bytes", "The memory tier's budget (--memory_tier_bytes)",
          static_cast<double>(s.memory_tier_budget_bytes));
    gauge("ckpt_memory_tier_bytes", "Bytes the memory tier holds now",
          static_cast<double>(s.memory_tier_bytes));
    {
      prometheus::MetricFamily& f = out.emplace_back();
      f.name = "ckpt_memory_read_bytes_total";
      f.help = "Chunk bytes loads read from the memory tier";
      f.type = prometheus::MetricType::Counter;
      f.metric.emplace_back().counter.value = static_cast<double>(s.memory_bytes_read);
    }
    {
      prometheus::MetricFamily& f = out.emplace_back();
      f.name = "ckpt_memory_persists_total";
      f.help = "Memory-tier steps persisted to storage in the background, by outcome";
      f.type = prometheus::MetricType::Counter;
      for (const auto& [outcome, value] :
           {std::pair<const char*, uint64_t>{"ok", s.memory_persists},
            std::pair<const char*, uint64_t>{"failed", s.memory_persist_failures}}) {
        prometheus::ClientMetric& m = f.metric.emplace_back();
        m.label.push_back({"outcome", outcome});
        m.counter.value = static_cast<double>(value);
      }
    }
    {
      std::map<std::string, int64_t> in_memory;
      for (const auto& [job, count] : s.memory_tier_steps) {
        in_memory[jobs_.ExistingLabel(job)] += count;
      }
      prometheus::MetricFamily& f = out.emplace_back();
      f.name = "ckpt_memory_tier_steps";
      f.help = "Committed checkpoints in the memory tier, by job";
      f.type = prometheus::MetricType::Gauge;
      for (const auto& [label, count] : in_memory) {
        prometheus::ClientMetric& m = f.metric.emplace_back();
        m.label = {{"ckpt_job", label}};
        m.gauge.value = static_cast<double>(count);
      }
    }
  }

  JobLabels& jobs_;
  const absl::Time started_;
  mutable absl::Mutex mu_;
  std::function<NodeSample()> sampler_ ABSL_GUARDED_BY(mu_);
};

Metrics::Metrics(MetricsOptions options)
    : started_(absl::Now()),
      jobs_(options.max_jobs),
      log_(options.log_sink, options.refusals_logged_per_second),
      registry_(std::make_shared<prometheus::Registry>()),
      families_(std::make_unique<Families>(*registry_)),
      sampled_(std::make_shared<Sampled>(jobs_, started_)) {}

Metrics::~Metrics() = default;

prometheus::Counter& Metrics::WrittenBytes(const std::string& job) {
  return families_->written.Add({{"ckpt_job", jobs_.LabelFor(job)}});
}

prometheus::Counter& Metrics::ReadBytes(const std::string& job) {
  return families_->read.Add({{"ckpt_job", jobs_.LabelFor(job)}});
}

void Metrics::SaveEnded(const SaveReport& r) {
  const std::string job = jobs_.LabelFor(r.job);
  const char* outcome = OutcomeOf(r.status);
  const std::string code = absl::StatusCodeToString(r.status.code());
  std::string line =
      absl::StrFormat("ckptd: save job=%s step=%d bytes=%d duration_s=%.3f outcome=%s code=%s",
                      r.job, r.step, r.bytes, Seconds(r.duration), outcome, code);
  // What compression saved, where the save asked for it.
  if (!r.codec.empty() && r.codec != "none") {
    absl::StrAppendFormat(&line, " codec=%s stored_bytes=%d", r.codec, r.stored_bytes);
  }
  if (r.status.ok()) {
    families_->save_duration.Add({{"ckpt_job", job}}, StageBuckets()).Observe(Seconds(r.duration));
    const std::pair<const char*, absl::Duration> stages[] = {{"plan", r.stages.plan},
                                                             {"snapshot", r.stages.snapshot},
                                                             {"write", r.stages.write},
                                                             {"fsync", r.stages.fsync},
                                                             {"commit", r.stages.commit}};
    for (const auto& [stage, d] : stages) {
      families_->save_stages.Add({{"ckpt_job", job}, {"stage", stage}}, StageBuckets())
          .Observe(Seconds(d));
      absl::StrAppendFormat(&line, " %s_s=%.3f", stage, Seconds(d));
    }
    families_->last_commit.Add({{"ckpt_job", job}}).SetToCurrentTime();
    const absl::Time now = absl::Now();
    costs_.Saved(r.job, now - r.duration, r.stages.plan + r.stages.snapshot, r.duration, now);
  } else {
    absl::StrAppend(&line, " error=", QuoteValue(r.status.message()));
  }
  // Counted last: a scrape that sees the count sees the observations.
  families_->saves.Add({{"ckpt_job", job}, {"outcome", outcome}, {"code", code}}).Increment();
  log_.Event(line);
}

void Metrics::LoadEnded(const LoadReport& r) {
  const std::string job = jobs_.LabelFor(r.job);
  const char* outcome = OutcomeOf(r.status);
  const std::string code = absl::StatusCodeToString(r.status.code());
  std::string line =
      absl::StrFormat("ckptd: load job=%s step=%s bytes=%d duration_s=%.3f outcome=%s code=%s",
                      r.job, StepText(r.step), r.bytes, Seconds(r.duration), outcome, code);
  if (!r.tier.empty()) absl::StrAppend(&line, " tier=", r.tier);
  if (r.fallback_chunks > 0) absl::StrAppend(&line, " fallback_chunks=", r.fallback_chunks);
  if (!r.sources.empty()) {
    // sources=memory@h0:4096,peer@h2:1024: kind@host:bytes, summing to delivered_bytes.
    uint64_t delivered = 0;
    std::vector<std::string> parts;
    for (const LoadSourceBytes& s : r.sources) {
      delivered += s.bytes;
      parts.push_back(absl::StrCat(s.kind, "@", s.host, ":", s.bytes));
    }
    absl::StrAppend(&line, " delivered_bytes=", delivered,
                    " sources=", QuoteValue(absl::StrJoin(parts, ","), 4096));
  }
  if (r.status.ok()) {
    for (const LoadSourceBytes& s : r.sources) {
      families_->load_sources.Add({{"ckpt_job", job}, {"source", s.kind}, {"host", s.host}})
          .Increment(static_cast<double>(s.bytes));
    }
    families_->load_duration.Add({{"ckpt_job", job}}, StageBuckets()).Observe(Seconds(r.duration));
    const std::pair<const char*, absl::Duration> stages[] = {{"plan", r.stages.plan},
                                                             {"read", r.stages.read},
                                                             {"verify", r.stages.verify},
                                                             {"deliver", r.stages.deliver}};
    for (const auto& [stage, d] : stages) {
      families_->load_stages.Add({{"ckpt_job", job}, {"stage", stage}}, StageBuckets())
          .Observe(Seconds(d));
      absl::StrAppendFormat(&line, " %s_s=%.3f", stage, Seconds(d));
    }
  } else {
    absl::StrAppend(&line, " error=", QuoteValue(r.status.message()));
  }
  // Every job that loads has a fallback series, at 0 until one happens, so
  // an alert on its increase sees it from the start.
  families_->load_fallbacks.Add({{"ckpt_job", job}});
  families_->loads.Add({{"ckpt_job", job}, {"outcome", outcome}, {"code", code}}).Increment();
  log_.Event(line);
}

void Metrics::Refused(absl::string_view method, absl::StatusCode code, absl::string_view message,
                      absl::string_view peer) {
  if (!IsRefusal(code)) return;
  const std::string name = MethodLabel(method);
  const std::string code_name = absl::StatusCodeToString(code);
  families_->refusals.Add({{"method", name}, {"code", code_name}}).Increment();
  log_.Refusal(absl::Now(),
               absl::StrCat("ckptd: refused method=", name, " code=", code_name,
                            " peer=", QuoteValue(peer, 128), " error=", QuoteValue(message)));
}

void Metrics::LoadFallback(const std::string& job) {
  families_->load_fallbacks.Add({{"ckpt_job", jobs_.LabelFor(job)}}).Increment();
}

void Metrics::ParityRebuilt(const std::string& job, int64_t step, const std::string& lost_host,
                            const std::vector<std::string>& files, uint64_t bytes) {
  const std::string label = jobs_.LabelFor(job);
  families_->parity_rebuilds.Add({{"ckpt_job", label}}).Increment();
  families_->parity_rebuilt_bytes.Add({{"ckpt_job", label}}).Increment(static_cast<double>(bytes));
  log_.Event(absl::StrFormat("ckptd: parity-rebuild job=%s step=%d host=%s files=%s bytes=%d", job,
                             step, QuoteValue(lost_host),
                             QuoteValue(absl::StrJoin(files, ","), 4096), bytes));
}

void Metrics::IoError(IoOp op) { families_->io_errors.Add({{"op", IoOpName(op)}}).Increment(); }

void Metrics::Tick(absl::Time now) { log_.Tick(now); }

void Metrics::SetSampler(std::function<NodeSample()> sampler) { sampled_->Set(std::move(sampler)); }

std::vector<std::weak_ptr<prometheus::Collectable>> Metrics::Collectables() const {
  return {registry_, sampled_};
}

std::string Metrics::TextFormat() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : sampled_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace ckpt::metrics
