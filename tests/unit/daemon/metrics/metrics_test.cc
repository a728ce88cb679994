#include "daemon/metrics/metrics.h"

#include <prometheus/counter.h>

#include <string>
#include <vector>

#include "daemon/metrics/metrics_server.h"
#include "tests/catch.h"
#include "tests/support/http_get.h"

namespace ckpt::metrics {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

struct Fixture {
  std::vector<std::string> lines;
  Metrics metrics{[this] {
    MetricsOptions o;
    o.max_jobs = 1;
    o.log_sink = [this](const std::string& line) { lines.push_back(line); };
    return o;
  }()};
};

SaveReport Committed(const std::string& job) {
  SaveReport r;
  r.job = job;
  r.step = 7;
  r.bytes = 4096;
  r.duration = absl::Seconds(3);
  r.stages = {absl::Milliseconds(10), absl::Seconds(1), absl::Seconds(2), absl::Milliseconds(300),
              absl::Milliseconds(20)};
  return r;
}

TEST_CASE("a committed save counts, observes every stage and logs one line", "[metrics]") {
  Fixture f;
  f.metrics.SaveEnded(Committed("llm"));
  const std::string text = f.metrics.TextFormat();
  INFO(text);
  CHECK(Has(text, "ckpt_saves_total{ckpt_job=\"llm\",code=\"OK\",outcome=\"ok\"} 1"));
  for (const char* stage : {"plan", "snapshot", "write", "fsync", "commit"}) {
    CHECK(
        Has(text, std::string("ckpt_save_stage_duration_seconds_count{ckpt_job=\"llm\",stage=\"") +
                      stage + "\"} 1"));
  }
  CHECK(Has(text, "ckpt_save_stage_duration_seconds_sum{ckpt_job=\"llm\",stage=\"write\"} 2"));
  CHECK(Has(text, "ckpt_save_duration_seconds_sum{ckpt_job=\"llm\"} 3"));
  CHECK(Has(text, "ckpt_last_commit_timestamp_seconds{ckpt_job=\"llm\"}"));
  REQUIRE(f.lines.size() == 1);
  CHECK(f.lines[0] ==
        "ckptd: save job=llm step=7 bytes=4096 duration_s=3.000 outcome=ok code=OK plan_s=0.010 "
        "snapshot_s=1.000 write_s=2.000 fsync_s=0.300 commit_s=0.020");
}

TEST_CASE("a failed save counts by outcome and code, observes no stage, logs its error",
          "[metrics]") {
  Fixture f;
  SaveReport r = Committed("llm");
  r.status = absl::CancelledError("cancelled by operator\nsecond line");
  f.metrics.SaveEnded(r);
  r.status = absl::DataLossError("disk");
  f.metrics.SaveEnded(r);
  const std::string text = f.metrics.TextFormat();
  INFO(text);
  CHECK(Has(text, "ckpt_saves_total{ckpt_job=\"llm\",code=\"CANCELLED\",outcome=\"aborted\"} 1"));
  CHECK(Has(text, "ckpt_saves_total{ckpt_job=\"llm\",code=\"DATA_LOSS\",outcome=\"failed\"} 1"));
  CHECK_FALSE(Has(text, "ckpt_save_stage_duration_seconds_count"));
  REQUIRE(f.lines.size() == 2);
  CHECK(f.lines[0] ==
        "ckptd: save job=llm step=7 bytes=4096 duration_s=3.000 outcome=aborted code=CANCELLED "
        "error=\"cancelled by operator\\nsecond line\"");
}

TEST_CASE("jobs past max_jobs share ckpt_job=_other", "[metrics]") {
  Fixture f;
  f.metrics.SaveEnded(Committed("first"));
  f.metrics.SaveEnded(Committed("second"));
  f.metrics.SaveEnded(Committed("third"));
  f.metrics.WrittenBytes("third").Increment(10);
  const std::string text = f.metrics.TextFormat();
  INFO(text);
  CHECK(Has(text, "ckpt_saves_total{ckpt_job=\"first\",code=\"OK\",outcome=\"ok\"} 1"));
  CHECK(Has(text, "ckpt_saves_total{ckpt_job=\"_other\",code=\"OK\",outcome=\"ok\"} 2"));
  CHECK(Has(text, "ckpt_written_bytes_total{ckpt_job=\"_other\"} 10"));
  CHECK_FALSE(Has(text, "job=\"second\""));
  // The log line names the real job.
  CHECK(Has(f.lines[2], "job=third "));
}

TEST_CASE("a load's stages and bytes", "[metrics]") {
  Fixture f;
  LoadReport r;
  r.job = "llm";
  r.step = 7;
  r.bytes = 8192;
  r.duration = absl::Seconds(1);
  r.stages = {absl::Milliseconds(5), absl::Milliseconds(600), absl::Milliseconds(100),
              absl::Milliseconds(200)};
  f.metrics.ReadBytes("llm").Increment(8192);
  f.metrics.LoadEnded(r);
  r.status = absl::DataLossError("crc mismatch");
  r.step = -1;
  f.metrics.LoadEnded(r);
  const std::string text = f.metrics.TextFormat();
  INFO(text);
  CHECK(Has(text, "ckpt_loads_total{ckpt_job=\"llm\",code=\"OK\",outcome=\"ok\"} 1"));
  CHECK(Has(text, "ckpt_loads_total{ckpt_job=\"llm\",code=\"DATA_LOSS\",outcome=\"failed\"} 1"));
  CHECK(Has(text, "ckpt_read_bytes_total{ckpt_job=\"llm\"} 8192"));
  for (const char* stage : {"plan", "read", "verify", "deliver"}) {
    CHECK(
        Has(text, std::string("ckpt_load_stage_duration_seconds_count{ckpt_job=\"llm\",stage=\"") +
                      stage + "\"} 1"));
  }
  REQUIRE(f.lines.size() == 2);
  CHECK(Has(f.lines[0], "ckptd: load job=llm step=7 bytes=8192 duration_s=1.000 outcome=ok"));
  CHECK(Has(f.lines[1], "step=latest"));
  CHECK(Has(f.lines[1], "error=\"crc mismatch\""));
}

TEST_CASE("a load's sources count by source and host and are logged; parity rebuilds too",
          "[metrics]") {
  Fixture f;
  LoadReport r;
  r.job = "llm";
  r.step = 3;
  r.tier = "memory";
  r.sources = {{"memory", "h1", 100}, {"parity", "h0", 30}, {"peer", "h2", 20}};
  f.metrics.LoadEnded(r);
  r.sources = {{"peer", "h2", 5}};
  f.metrics.LoadEnded(r);
  // A failed load's bytes are not counted: it delivered nothing usable.
  r.status = absl::UnavailableError("host h2 lost");
  f.metrics.LoadEnded(r);
  f.metrics.ParityRebuilt("llm", 3, "h0", {"data/h0-0.bin", "data/h0-1.bin"}, 4096);
  const std::string text = f.metrics.TextFormat();
  INFO(text);
  CHECK(Has(text, "ckpt_load_bytes_total{ckpt_job=\"llm\",host=\"h1\",source=\"memory\"} 100"));
  CHECK(Has(text, "ckpt_load_bytes_total{ckpt_job=\"llm\",host=\"h0\",source=\"parity\"} 30"));
  CHECK(Has(text, "ckpt_load_bytes_total{ckpt_job=\"llm\",host=\"h2\",source=\"peer\"} 25"));
  CHECK(Has(text, "ckpt_parity_rebuilds_total{ckpt_job=\"llm\"} 1"));
  CHECK(Has(text, "ckpt_parity_rebuilt_bytes_total{ckpt_job=\"llm\"} 4096"));
  REQUIRE(f.lines.size() == 4);
  CHECK(Has(f.lines[0],
            " tier=memory delivered_bytes=150 sources=\"memory@h1:100,parity@h0:30,peer@h2:20\" "
            "plan_s="));
  CHECK(Has(f.lines[2], "sources=\"peer@h2:5\""));
  CHECK(f.lines[3] ==
        "ckptd: parity-rebuild job=llm step=3 host=\"h0\" files=\"data/h0-0.bin,data/h0-1.bin\" "
        "bytes=4096");
}

TEST_CASE("refusals count by method and code; other codes are not refusals", "[metrics]") {
  Fixture f;
  f.metrics.Refused("/ckpt.v1.NodeService/PlanSave", absl::StatusCode::kInvalidArgument, "bad name",
                    "unix:");
  f.metrics.Refused("/ckpt.v1.NodeService/PlanSave", absl::StatusCode::kNotFound, "no", "unix:");
  f.metrics.Refused("/x/evil method\n", absl::StatusCode::kPermissionDenied, "no",
                    "ipv4:1.2.3.4:5");
  const std::string text = f.metrics.TextFormat();
  INFO(text);
  CHECK(Has(text, "ckpt_refusals_total{code=\"INVALID_ARGUMENT\",method=\"PlanSave\"} 1"));
  CHECK(Has(text, "ckpt_refusals_total{code=\"PERMISSION_DENIED\",method=\"_other\"} 1"));
  CHECK_FALSE(Has(text, "NOT_FOUND"));
  REQUIRE(f.lines.size() == 2);
  CHECK(f.lines[0] ==
        "ckptd: refused method=PlanSave code=INVALID_ARGUMENT peer=\"unix:\" error=\"bad "
        "name\"");
}

TEST_CASE("io errors exist at 0 and count by op", "[metrics]") {
  Fixture f;
  CHECK(Has(f.metrics.TextFormat(), "ckpt_io_errors_total{op=\"sync\"} 0"));
  f.metrics.IoError(IoOp::kSync);
  CHECK(Has(f.metrics.TextFormat(), "ckpt_io_errors_total{op=\"sync\"} 1"));
}

TEST_CASE("sampled gauges are read at collection time", "[metrics]") {
  Fixture f;
  int calls = 0;
  f.metrics.SetSampler([&] {
    ++calls;
    NodeSample s;
    s.pool_capacity_bytes = 1 << 20;
    s.pool_used_bytes = 4096 * calls;
    s.pool_waiters = 2;
    s.pool_stall = absl::Milliseconds(1500);
    s.pool_segment_renewals = 5;
    s.save_plan_cache_hits = 7;
    s.save_plan_cache_misses = 2;
    s.writer_queue_chunks = 9;
    s.checkpoints = {{"a", 3}, {"b", 2}, {"c", 1}};
    return s;
  });
  std::string text = f.metrics.TextFormat();
  INFO(text);
  CHECK(Has(text, "ckpt_up 1"));
  CHECK(Has(text, "ckpt_build_info{revision="));
  CHECK(Has(text, "ckpt_pool_capacity_bytes 1048576"));
  CHECK(Has(text, "ckpt_pool_used_bytes 4096"));
  CHECK(Has(text, "ckpt_pool_waiters 2"));
  CHECK(Has(text, "ckpt_pool_stall_seconds_total 1.5"));
  CHECK(Has(text, "ckpt_pool_segment_renewals_total 5"));
  CHECK(Has(text, "ckpt_save_plans_total{source=\"cache\"} 7"));
  CHECK(Has(text, "ckpt_save_plans_total{source=\"planned\"} 2"));
  CHECK(Has(text, "ckpt_writer_queue_chunks 9"));
  // Jobs found on disk take no label slot: until a save or load names
  // them, they add up in _other.
  CHECK(Has(text, "ckpt_checkpoints{ckpt_job=\"_other\"} 6"));
  f.metrics.WrittenBytes("b");  // max_jobs 1: "b" takes the one slot
  text = f.metrics.TextFormat();
  CHECK(Has(text, "ckpt_checkpoints{ckpt_job=\"b\"} 2"));
  CHECK(Has(text, "ckpt_checkpoints{ckpt_job=\"_other\"} 4"));
  CHECK(Has(f.metrics.TextFormat(), "ckpt_pool_used_bytes 12288"));  // a third read
  f.metrics.SetSampler(nullptr);
  CHECK(Has(f.metrics.TextFormat(), "ckpt_pool_used_bytes 0"));
}

TEST_CASE("MetricsServer serves /metrics over HTTP and refuses a taken port", "[metrics]") {
  Fixture f;
  f.metrics.SaveEnded(Committed("llm"));
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0", f.metrics);
  INFO(server.status());
  REQUIRE(server.ok());
  REQUIRE((*server)->port() > 0);
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  absl::StatusOr<testing::HttpReply> reply = testing::HttpGet(address, "/metrics");
  INFO(reply.status());
  REQUIRE(reply.ok());
  CHECK(reply->status == 200);
  CHECK(Has(reply->body, "ckpt_saves_total{ckpt_job=\"llm\",code=\"OK\",outcome=\"ok\"} 1"));
  CHECK(Has(reply->body, "ckpt_up 1"));

  absl::StatusOr<std::unique_ptr<MetricsServer>> second = MetricsServer::Start(address, f.metrics);
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK(Has(std::string(second.status().message()), address));
}

}  // namespace
}  // namespace ckpt::metrics
