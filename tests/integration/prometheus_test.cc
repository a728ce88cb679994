// Acceptance for the metrics (docs/operations.md "Metrics and log lines"): a real Prometheus
// server (Debian's, on loopback) scrapes a real ckptd while ranks save and
// load; the test reads the values back through Prometheus' HTTP API and
// checks them against what the ranks saved (the manifest), the daemon's own
// status and its log lines. Also: the alert rules load into that server and
// name only metrics it has seen; refusals are counted and their log lines
// rate-limited.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "ckpt/v1/node.grpc.pb.h"
#include "tests/catch.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

constexpr char kJob[] = "metrics";
constexpr int64_t kStep = 10;
constexpr uint64_t kPoolBytes = 64 << 20;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Polls `probe` until it returns true or 30 s pass: Prometheus scrapes on
// its own clock, so values appear a scrape interval after the fact.
template <typename Probe>
bool Eventually(Probe probe) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (probe()) return true;
    absl::SleepFor(absl::Milliseconds(100));  // a polling interval, not a wait for an event
  }
  return probe();
}

// ckptd with --metrics_address on a free port (another one if taken).
std::string StartWithMetrics(TestDaemon& d, std::vector<std::string> flags = {}) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string address = absl::StrCat("127.0.0.1:", FreeTcpPort());
    std::vector<std::string> with = flags;
    with.push_back("--metrics_address=" + address);
    if (d.Start(with).ok()) return address;
  }
  FAIL("ckptd did not start with a metrics address");
  return "";
}

// A Prometheus server scraping `target` every 500 ms, with the example
// alert rules loaded; killed (SIGKILL, by Subprocess) and its directory
// removed when destroyed, whatever the test's outcome.
class PrometheusServer {
 public:
  PrometheusServer(const std::string& dir, const std::string& target) : dir_(dir) {
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/prometheus.yml")
        << "global:\n"
        << "  scrape_interval: 500ms\n"
        << "  scrape_timeout: 400ms\n"
        << "  evaluation_interval: 500ms\n"
        << "rule_files:\n"
        << "  - " << CKPT_SOURCE_DIR << "/deploy/prometheus-alerts.yml\n"
        << "scrape_configs:\n"
        << "  - job_name: ckptd\n"
        << "    static_configs:\n"
        << "      - targets: ['" << target << "']\n";
    for (int attempt = 0; attempt < 5 && process_ == nullptr; ++attempt) {
      address_ = absl::StrCat("127.0.0.1:", FreeTcpPort());
      absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(
          {CKPT_PROMETHEUS_PATH, "--config.file=" + dir_ + "/prometheus.yml",
           "--storage.tsdb.path=" + dir_ + "/data", "--web.listen-address=" + address_});
      INFO(p.status());
      REQUIRE(p.ok());
      process_ = std::move(*p);
      const bool ready = Eventually([&] {
        absl::StatusOr<HttpReply> r = HttpGet(address_, "/-/ready", absl::Seconds(2));
        return (r.ok() && r->status == 200) || !process_->Running();
      });
      if (!ready || !process_->Running()) {
        UNSCOPED_INFO("prometheus on " << address_ << " did not get ready:\n"
                                       << process_->Output());
        process_.reset();
      }
    }
    REQUIRE(process_ != nullptr);
  }
  ~PrometheusServer() {
    process_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The raw body of an API call.
  std::string Api(const std::string& path_and_query) const {
    absl::StatusOr<HttpReply> r = HttpGet(address_, path_and_query);
    INFO(path_and_query << ": " << r.status());
    REQUIRE(r.ok());
    return r->body;
  }
  // The value of an instant query that yields one sample; nullopt if none.
  std::optional<double> Query(const std::string& promql) const {
    const std::string body = Api("/api/v1/query?query=" + UrlEncode(promql));
    // {"status":"success","data":{"resultType":"vector","result":[{"metric":{...},"value":[t,"v"]}]}}
    const size_t at = body.find("\"value\":[");
    if (at == std::string::npos) return std::nullopt;
    const size_t open = body.find('"', body.find(',', at));
    const size_t close = body.find('"', open + 1);
    double value = 0;
    if (open == std::string::npos || close == std::string::npos ||
        !absl::SimpleAtod(body.substr(open + 1, close - open - 1), &value)) {
      return std::nullopt;
    }
    return value;
  }
  std::string Output() const { return process_ ? process_->Output() : ""; }

 private:
  const std::string dir_;
  std::string address_;
  std::unique_ptr<Subprocess> process_;
};

void RequireAllOk(const std::vector<ExitInfo>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    INFO("rank " << r << " output:\n" << ranks[r].output);
    REQUIRE(ranks[r].ok());
  }
}

// Payload bytes of a committed step, from its manifest: what the save
// wrote.
uint64_t StoredBytes(const TestDaemon& d, const std::string& job, int64_t step) {
  grpc::ClientContext context;
  v1::InspectCheckpointRequest request;
  request.set_job(job);
  request.set_step(step);
  v1::InspectCheckpointResponse response;
  const grpc::Status s = d.Stub()->InspectCheckpoint(&context, request, &response);
  INFO(s.error_message());
  REQUIRE(s.ok());
  uint64_t bytes = 0;
  for (const v1::TensorEntry& t : response.manifest().tensors()) {
    for (const v1::StoredShard& shard : t.shards()) {
      for (const v1::StoredChunk& c : shard.chunks()) bytes += c.length();
    }
  }
  for (const v1::ObjectEntry& o : response.manifest().objects()) bytes += o.chunk().length();
  return bytes;
}

// The value of `key=` in the daemon's line that starts with `prefix`.
std::optional<double> LoggedValue(const std::string& output, const std::string& prefix,
                                  const std::string& key) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      if (!absl::ConsumePrefix(&field, key + "=")) continue;
      double value = 0;
      if (absl::SimpleAtod(field, &value)) return value;
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("Prometheus scrapes a save's and a load's metrics with the right values",
          "[integration][metrics]") {
  TestDaemon d;
  // With a memory tier (these saves do not use it), so that every metric
  // the example alerts name is served.
  const std::string target = StartWithMetrics(
      d, {absl::StrCat("--pool_bytes=", kPoolBytes), "--memory_tier_bytes=1048576"});
  PrometheusServer prometheus(d.dir() + "/prometheus", target);

  REQUIRE(Eventually([&] { return prometheus.Query("up{job=\"ckptd\"}") == 1.0; }));
  RequireAllOk(d.RunRanks(kJob, "save", 2, kStep, 4));
  RequireAllOk(d.RunRanks(kJob, "load", 2, kStep, 4));
  INFO("ckptd output:\n" << d.Output());
  const uint64_t saved = StoredBytes(d, kJob, kStep);
  REQUIRE(saved > 1'000'000);

  const std::string job = absl::StrCat("ckpt_job=\"", kJob, "\"");
  // The ranks learn of their commit and their load's end only after the
  // daemon counted them, and the count comes after the observations: once
  // a scrape shows the load, it shows everything below.
  REQUIRE(Eventually([&] {
    return prometheus.Query(absl::StrCat("ckpt_loads_total{", job, ",outcome=\"ok\"}")) == 1.0;
  }));
  // The save's bytes: exactly what the manifest stores.
  CHECK(prometheus.Query(absl::StrCat("ckpt_written_bytes_total{", job, "}")) ==
        static_cast<double>(saved));
  CHECK(prometheus.Query(absl::StrCat("ckpt_saves_total{", job, ",outcome=\"ok\",code=\"OK\"}")) ==
        1.0);
  CHECK(prometheus.Query(absl::StrCat("sum(ckpt_saves_total{", job, ",outcome!=\"ok\"})")) ==
        std::nullopt);

  // Each stage observed once, with the duration the save's log line gives.
  const std::string out = d.Output();
  const std::string save_line = absl::StrCat("ckptd: save job=", kJob, " step=", kStep, " ");
  CHECK(LoggedValue(out, save_line, "bytes") == static_cast<double>(saved));
  for (const char* stage : {"plan", "snapshot", "write", "fsync", "commit"}) {
    INFO("save stage " << stage);
    const std::string labels = absl::StrCat("{", job, ",stage=\"", stage, "\"}");
    CHECK(prometheus.Query("ckpt_save_stage_duration_seconds_count" + labels) == 1.0);
    const std::optional<double> sum =
        prometheus.Query("ckpt_save_stage_duration_seconds_sum" + labels);
    const std::optional<double> logged = LoggedValue(out, save_line, absl::StrCat(stage, "_s"));
    REQUIRE(sum.has_value());
    REQUIRE(logged.has_value());
    CHECK(*sum >= 0);
    CHECK(std::abs(*sum - *logged) <= 0.0006);  // the line rounds to ms
  }
  const std::optional<double> total =
      prometheus.Query(absl::StrCat("ckpt_save_duration_seconds_sum{", job, "}"));
  REQUIRE(total.has_value());
  CHECK(std::abs(*total - *LoggedValue(out, save_line, "duration_s")) <= 0.0006);
  CHECK(*prometheus.Query(absl::StrCat("ckpt_save_stage_duration_seconds_sum{", job,
                                       ",stage=\"write\"}")) <= *total);

  const std::string load_line = absl::StrCat("ckptd: load job=", kJob, " step=", kStep, " ");
  for (const char* stage : {"plan", "read", "verify", "deliver"}) {
    INFO("load stage " << stage);
    const std::string labels = absl::StrCat("{", job, ",stage=\"", stage, "\"}");
    CHECK(prometheus.Query("ckpt_load_stage_duration_seconds_count" + labels) == 1.0);
    const std::optional<double> sum =
        prometheus.Query("ckpt_load_stage_duration_seconds_sum" + labels);
    REQUIRE(sum.has_value());
    CHECK(std::abs(*sum - *LoggedValue(out, load_line, absl::StrCat(stage, "_s"))) <= 0.0006);
  }
  // Every stored byte is read (at least once, O_DIRECT may round up), and
  // the metric agrees with the daemon's own count and its log line.
  const v1::GetStatusResponse status = d.Status();
  CHECK(status.storage_bytes_read() >= saved);
  CHECK(Eventually([&] {
    return prometheus.Query(absl::StrCat("ckpt_read_bytes_total{", job, "}")) ==
           static_cast<double>(status.storage_bytes_read());
  }));
  CHECK(LoggedValue(out, load_line, "bytes") == static_cast<double>(status.storage_bytes_read()));

  // Pool gauges: the configured capacity; nothing held once both are done.
  CHECK(prometheus.Query("ckpt_pool_capacity_bytes") == static_cast<double>(kPoolBytes));
  CHECK(Eventually([&] { return prometheus.Query("ckpt_pool_used_bytes") == 0.0; }));
  CHECK(prometheus.Query("ckpt_pool_waiters") == 0.0);
  CHECK(prometheus.Query("ckpt_pool_stall_seconds_total").has_value());
  CHECK(prometheus.Query("ckpt_writer_queue_chunks") == 0.0);
  CHECK(Eventually(
      [&] { return prometheus.Query(absl::StrCat("ckpt_checkpoints{", job, "}")) == 1.0; }));
  CHECK(prometheus.Query("ckpt_up") == 1.0);
  CHECK(prometheus.Query("count(ckpt_build_info{version!=\"\"})") == 1.0);
  CHECK(prometheus.Query(absl::StrCat("ckpt_last_commit_timestamp_seconds{", job, "}")) > 0);
  CHECK(prometheus.Query("sum(ckpt_io_errors_total)") == 0.0);

  // The alert rules loaded, evaluate without error, and name only metrics
  // this server has scraped.
  CHECK(Eventually([&] {
    const std::string rules = prometheus.Api("/api/v1/rules");
    return rules.find("\"health\":\"ok\"") != std::string::npos &&
           rules.find("\"health\":\"err") == std::string::npos &&
           rules.find("\"health\":\"unknown\"") == std::string::npos;
  }));
  const std::string names = prometheus.Api("/api/v1/label/__name__/values");
  const std::string alerts =
      ReadFile(std::string(CKPT_SOURCE_DIR) + "/deploy/prometheus-alerts.yml");
  std::set<std::string> used;
  const std::regex metric("ckpt_[a-z_]+");
  for (auto it = std::sregex_iterator(alerts.begin(), alerts.end(), metric);
       it != std::sregex_iterator(); ++it) {
    if (it->str() != "ckpt_job") used.insert(it->str());  // a label, not a metric
  }
  CHECK(used.size() >= 5);
  for (const std::string& name : used) {
    INFO("deploy/prometheus-alerts.yml uses " << name);
    CHECK(names.find("\"" + name + "\"") != std::string::npos);
  }
}

TEST_CASE("Prometheus scrapes the memory tier's gauges and counters", "[integration][metrics]") {
  constexpr uint64_t kTier = uint64_t{64} << 20;
  TestDaemon d;
  const std::string target = StartWithMetrics(
      d, {absl::StrCat("--pool_bytes=", kPoolBytes), absl::StrCat("--memory_tier_bytes=", kTier)});
  PrometheusServer prometheus(d.dir() + "/prometheus", target);
  REQUIRE(Eventually([&] { return prometheus.Query("up{job=\"ckptd\"}") == 1.0; }));
  RequireAllOk(d.RunRanks("tiered", "save", 2, 3, 1, 0, {"--tier=both"}));
  REQUIRE(AwaitStatus(d, [](const v1::GetStatusResponse& s) { return s.memory_persists() == 1; }));
  RequireAllOk(d.RunRanks("tiered", "load", 2, -1, 1, 2, {"--from=memory"}));
  INFO("ckptd output:\n" << d.Output());
  const v1::GetStatusResponse status = d.Status();
  REQUIRE(status.memory_tier_bytes() > 0);
  REQUIRE(status.memory_bytes_read() > 0);
  CHECK(prometheus.Query("ckpt_memory_tier_budget_bytes") == static_cast<double>(kTier));
  CHECK(Eventually([&] {
    return prometheus.Query("ckpt_memory_tier_bytes") ==
           static_cast<double>(status.memory_tier_bytes());
  }));
  CHECK(Eventually(
      [&] { return prometheus.Query("ckpt_memory_tier_steps{ckpt_job=\"tiered\"}") == 1.0; }));
  CHECK(Eventually([&] {
    return prometheus.Query("ckpt_memory_read_bytes_total") ==
           static_cast<double>(status.memory_bytes_read());
  }));
  CHECK(Eventually(
      [&] { return prometheus.Query("ckpt_memory_persists_total{outcome=\"ok\"}") == 1.0; }));
  CHECK(prometheus.Query("ckpt_memory_persists_total{outcome=\"failed\"}") == 0.0);
  // The load read memory alone: storage's read counter never moved.
  CHECK(prometheus.Query("sum(ckpt_read_bytes_total)").value_or(0) == 0.0);
}

TEST_CASE("a save that times out is logged and counted as aborted", "[integration][metrics]") {
  TestDaemon d;
  const std::string target = StartWithMetrics(d, {"--plan_timeout_s=1"});
  // Rank 0 of a world of 2: rank 1 never comes, the plan barrier times out.
  const ExitInfo rank = d.StartRank("lonely", "save", 0, 2, 5)->Wait();
  INFO(rank.output);
  CHECK_FALSE(rank.ok());
  const std::string line = "ckptd: save job=lonely step=5 bytes=0 ";
  REQUIRE(Eventually([&] { return d.Output().find(line) != std::string::npos; }));
  const std::string out = d.Output();
  INFO(out);
  const size_t at = out.find(line);
  const std::string logged = out.substr(at, out.find('\n', at) - at);
  CHECK(logged.find(" outcome=aborted code=DEADLINE_EXCEEDED error=\"") != std::string::npos);
  CHECK(logged.find("did not ask to save within") != std::string::npos);
  absl::StatusOr<HttpReply> scrape = HttpGet(target, "/metrics");
  REQUIRE(scrape.ok());
  INFO(scrape->body);
  CHECK(scrape->body.find("ckpt_saves_total{ckpt_job=\"lonely\",code=\"DEADLINE_EXCEEDED\","
                          "outcome=\"aborted\"} 1") != std::string::npos);
  CHECK(scrape->body.find("ckpt_save_stage_duration_seconds_count{ckpt_job=\"lonely\"") ==
        std::string::npos);
}

TEST_CASE("refused calls are counted, and their log lines rate-limited", "[integration][metrics]") {
  TestDaemon d;
  const std::string target = StartWithMetrics(d);
  constexpr int kCalls = 200;
  std::unique_ptr<v1::NodeService::Stub> stub = d.Stub();
  const absl::Time start = absl::Now();
  for (int i = 0; i < kCalls; ++i) {
    grpc::ClientContext context;
    v1::AttachRequest request;
    request.set_job("bad/job\nname");  // a path and a newline: refused
    request.set_rank(0);
    request.set_world_size(1);
    v1::AttachResponse response;
    REQUIRE(stub->Attach(&context, request, &response).error_code() ==
            grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Each one-second window admits 10 lines; the calls spanned this many.
  const int64_t windows = absl::ToInt64Seconds(absl::Now() - start) + 2;
  absl::StatusOr<HttpReply> scrape = HttpGet(target, "/metrics");
  REQUIRE(scrape.ok());
  INFO(scrape->body);
  CHECK(scrape->body.find(absl::StrCat(
            "ckpt_refusals_total{code=\"INVALID_ARGUMENT\",method=\"Attach\"} ", kCalls)) !=
        std::string::npos);

  // Every call is either logged or counted in a "not logged" line, which
  // comes once its second is over.
  int refused_lines = 0;
  uint64_t suppressed = 0;
  auto count = [&] {
    refused_lines = 0;
    suppressed = 0;
    for (absl::string_view line : absl::StrSplit(d.Output(), '\n')) {
      if (absl::StartsWith(line, "ckptd: refused method=Attach code=INVALID_ARGUMENT ")) {
        ++refused_lines;
      }
      uint64_t n = 0;
      if (absl::ConsumePrefix(&line, "ckptd: refused: ") &&
          absl::SimpleAtoi(line.substr(0, line.find(' ')), &n)) {
        suppressed += n;
      }
    }
    return refused_lines + suppressed == kCalls;
  };
  CHECK(Eventually(count));
  INFO(d.Output());
  CHECK(suppressed > 0);
  CHECK(refused_lines >= 10);
  CHECK(refused_lines <= 10 * windows);
  // The caller's newline is escaped: one event, one line.
  CHECK(d.Output().find("bad/job\\nname") != std::string::npos);
}

TEST_CASE("ckptd refuses to start on a metrics address it cannot serve", "[integration][metrics]") {
  TestDaemon first;
  const std::string taken = StartWithMetrics(first);
  TestDaemon second;
  const absl::Status s = second.Start({"--metrics_address=" + taken});
  REQUIRE_FALSE(s.ok());
  CHECK(s.ToString().find("cannot serve metrics on --metrics_address=" + taken) !=
        std::string::npos);
}

}  // namespace ckpt::testing
