// Storage faults show in the metrics: an in-process ckptd over a
// fault-injecting backend (daemon/storage/fault_injection.h), demo ranks as
// real processes, /metrics read over HTTP.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/service/node_daemon.h"
#include "daemon/storage/fault_injection.h"
#include "daemon/storage/memory/memory_backend.h"
#include "tests/catch.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_daemon.h"

namespace ckpt::testing {
namespace {

constexpr char kRoot[] = "/ckpt";
constexpr char kJob[] = "faulty";

struct FaultyDaemon {
  FaultyDaemon() {
    char pattern[] = "/tmp/ckpt-metrics-XXXXXX";
    dir = mkdtemp(pattern);
    session::DaemonOptions o;
    o.storage_root = kRoot;
    o.socket_path = dir + "/ckptd.sock";
    o.pool_bytes = 32 << 20;
    o.chunk_bytes = 64 << 10;
    o.writer_threads = 2;
    o.host_name = "testhost";
    auto backend = std::make_unique<storage::FaultInjectionBackend>(
        std::make_unique<storage::MemoryBackend>());
    faults = backend.get();
    for (int attempt = 0; attempt < 5 && daemon == nullptr; ++attempt) {
      metrics_address = absl::StrCat("127.0.0.1:", FreeTcpPort());
      o.metrics_address = metrics_address;
      auto created = service::NodeDaemon::Create(o, std::move(backend));
      REQUIRE(created.ok());
      if ((*created)->Start().ok()) {
        daemon = std::move(*created);
      } else {
        // The port was taken in between: build it again on another.
        backend = std::make_unique<storage::FaultInjectionBackend>(
            std::make_unique<storage::MemoryBackend>());
        faults = backend.get();
      }
    }
    REQUIRE(daemon != nullptr);
  }
  ~FaultyDaemon() {
    daemon.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  // One demo rank (world 1) saving or loading `step`; true if it succeeded.
  bool Rank(const std::string& mode, int64_t step) const {
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(
        {DemoRankPath(), "--socket=" + dir + "/ckptd.sock", absl::StrCat("--job=", kJob),
         "--mode=" + mode, "--rank=0", "--world=1", absl::StrCat("--step=", step), "--scale=1"});
    REQUIRE(p.ok());
    const ExitInfo info = (*p)->Wait();
    UNSCOPED_INFO("rank " << mode << " step " << step << ":\n" << info.output);
    return info.ok();
  }

  std::string Scrape() const {
    absl::StatusOr<HttpReply> reply = HttpGet(metrics_address, "/metrics");
    REQUIRE(reply.ok());
    REQUIRE(reply->status == 200);
    return reply->body;
  }

  std::string dir;
  std::string metrics_address;
  storage::FaultInjectionBackend* faults = nullptr;
  std::unique_ptr<service::NodeDaemon> daemon;
};

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

}  // namespace

TEST_CASE("a failed fsync and a corrupt read are counted as I/O errors and failed outcomes",
          "[integration][metrics]") {
  FaultyDaemon d;
  CHECK(Has(d.Scrape(), "ckpt_io_errors_total{op=\"sync\"} 0"));
  // The job's first save records its owner (an fsync): recorded here
  // before the fault, so the failing fsync is the save's data.
  {
    const std::string job_dir = absl::StrCat(kRoot, "/", kJob);
    REQUIRE(d.faults->CreateDirs(job_dir).ok());
    auto owner = d.faults->NewWritableFile(job_dir + "/OWNER");
    REQUIRE(owner.ok());
    const std::string record = absl::StrCat("uid ", geteuid(), "\n");
    REQUIRE((*owner)->WriteAt(0, record.data(), record.size()).ok());
    REQUIRE((*owner)->Close().ok());
  }

  d.faults->FailAllSyncs(true);
  CHECK_FALSE(d.Rank("save", 1));
  std::string text = d.Scrape();
  INFO(text);
  CHECK(Has(text, "ckpt_io_errors_total{op=\"sync\"} 1"));
  CHECK(Has(text, "ckpt_io_errors_total{op=\"write\"} 0"));
  CHECK(Has(text, absl::StrCat("ckpt_saves_total{ckpt_job=\"", kJob, "\",code=\"")));
  CHECK(Has(text, "outcome=\"failed\"} 1"));
  CHECK_FALSE(Has(text, "outcome=\"ok\""));

  d.faults->ClearFaults();
  REQUIRE(d.Rank("save", 2));
  // Every data file of step 2 reads back with a bit flipped.
  const std::string data = absl::StrCat(kRoot, "/", kJob, "/step-2/data");
  absl::StatusOr<std::vector<std::string>> files = d.faults->ListDir(data);
  REQUIRE(files.ok());
  REQUIRE_FALSE(files->empty());
  for (const std::string& f : *files) d.faults->CorruptReads(data + "/" + f);
  CHECK_FALSE(d.Rank("load", 2));
  text = d.Scrape();
  UNSCOPED_INFO(text);
  CHECK(Has(text, absl::StrCat("ckpt_saves_total{ckpt_job=\"", kJob,
                               "\",code=\"OK\",outcome=\"ok\"} 1")));
  CHECK(Has(text, absl::StrCat("ckpt_loads_total{ckpt_job=\"", kJob,
                               "\",code=\"DATA_LOSS\",outcome=\"failed\"} 1")));
  CHECK_FALSE(Has(text, "ckpt_io_errors_total{op=\"read\"} 0"));
  CHECK(Has(text, "ckpt_checkpoints{ckpt_job=\"faulty\"} 1"));
  CHECK(Has(text, "ckpt_pool_used_bytes 0"));
}

}  // namespace ckpt::testing
