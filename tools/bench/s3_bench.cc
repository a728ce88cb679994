// How `ckpt-bench --s3` measures (s3_bench.h):
//  1. The server: tools/dev/s3-server.sh in a directory of its own under
//     --dir (default /var/tmp), or --s3-endpoint. A bucket of this run.
//  2. ckptd on s3://<bucket>/bench with its metrics served; --ranks ranks
//     holding --state-gib GiB in total save it blocking, durable, twice
//     (s3_persist_gbps: the faster round, save to persisted, slowest rank),
//     and load it back twice (s3_load_gbps, checked). The requests ckptd
//     made over the four, per GiB moved: s3_requests_per_gib.
//  3. The baselines: a file of the same size, uploaded and downloaded by
//     boto3 and by awscli (tools/bench/s3_baseline.py, which checks the
//     copy); the best of each direction is s3_baseline_put_gbps and
//     s3_baseline_get_gbps. A client that is not installed is skipped.
#include "tools/bench/s3_bench.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "daemon/storage/s3/http.h"
#include "daemon/storage/s3/s3_client.h"
#include "tools/bench/child_process.h"

namespace ckpt::bench {
namespace {

constexpr double kGB = 1e9;

std::string Source(const std::string& relative) {
  return absl::StrCat(CKPT_SOURCE_DIR, "/", relative);
}

// Runs a command, returning its stdout (stderr passes through).
absl::StatusOr<std::string> Capture(const std::string& command, int* rc_out = nullptr) {
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return absl::InternalError(absl::StrCat("cannot run ", command));
  std::string text;
  char buf[4096];
  while (fgets(buf, sizeof buf, out) != nullptr) text += buf;
  const int rc = pclose(out);
  const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (rc_out != nullptr) {
    *rc_out = code;
    return text;
  }
  if (code != 0) {
    return absl::InternalError(absl::StrCat(command, " exited with ", code, ": ", text));
  }
  return text;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// ckptd's count of S3 requests, from its /metrics.
absl::StatusOr<double> RequestsSoFar(const std::string& metrics_address) {
  storage::s3::HttpRequest get;
  get.method = "GET";
  get.url = absl::StrCat("http://", metrics_address, "/metrics");
  get.max_body = 16 << 20;
  absl::StatusOr<storage::s3::HttpResponse> r = storage::s3::PerformHttp(get);
  if (!r.ok()) return r.status();
  const std::string key = "ckpt_storage_requests_total{backend=\"s3\"} ";
  const size_t at = r->body.find(key);
  double value = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtod(r->body.substr(at + key.size(), r->body.find('\n', at) - at - key.size()),
                        &value)) {
    return absl::NotFoundError("ckptd's metrics have no ckpt_storage_requests_total");
  }
  return value;
}

// A file of `bytes` pseudo-random bytes (nothing a server could compress).
absl::Status WriteRandomFile(const std::string& path, uint64_t bytes) {
  std::ofstream out(path, std::ios::binary);
  std::mt19937_64 random(7);
  std::vector<uint64_t> block(1 << 17);
  for (uint64_t done = 0; done < bytes;) {
    for (uint64_t& v : block) v = random();
    const uint64_t n = std::min<uint64_t>(bytes - done, block.size() * 8);
    out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(n));
    done += n;
  }
  out.close();
  return out ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", path));
}

// The S3 server of this run: started here unless given.
struct Server {
  std::string endpoint;
  std::string dir;  // non-empty: started here, stopped at the end
  ~Server() {
    if (dir.empty()) return;
    (void)Capture(absl::StrCat(Source("tools/dev/s3-server.sh"), " stop ", dir, " 2>&1"));
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

absl::Status Measure(const Config& c, const Workspace& ws, std::map<std::string, double>& f) {
  Server server;
  server.endpoint = c.s3_endpoint;
  if (server.endpoint.empty()) {
    server.dir = ws.work + "/swift";
    absl::FPrintF(stderr, "ckpt-bench: starting Swift s3api under %s...\n", server.dir);
    absl::StatusOr<std::string> started =
        Capture(absl::StrCat(Source("tools/dev/s3-server.sh"), " start ", server.dir, " 2>&1"));
    if (!started.ok()) return started.status();
    const size_t at = started->find("endpoint=");
    if (at == std::string::npos) return absl::InternalError(*started);
    server.endpoint = std::string(absl::StripAsciiWhitespace(started->substr(at + 9)));
    setenv("AWS_ACCESS_KEY_ID", "ckpt:tester", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "ckpt-secret", 1);
  }
  const char* key_id = std::getenv("AWS_ACCESS_KEY_ID");
  const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  if (key_id == nullptr || secret == nullptr) {
    return absl::InvalidArgumentError(
        "--s3-endpoint needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
  }
  storage::s3::S3ClientOptions client_options;
  client_options.endpoint = server.endpoint;
  client_options.credentials = {key_id, secret, ""};
  storage::s3::S3Client client(client_options);
  const std::string bucket = absl::StrCat("ckpt-bench-", getpid());
  if (absl::Status s = client.CreateBucket(bucket); !s.ok()) return s;

  const double gib = static_cast<double>(ws.bytes) / (1ull << 30);
  const std::string metrics = absl::StrCat("127.0.0.1:", FreePort());
  absl::StatusOr<std::unique_ptr<ChildProcess>> daemon =
      StartDaemon(c, ws.work, ws.socket, PoolBytes(c, ws.bytes),
                  {"--storage_root=s3://" + bucket + "/bench", "--s3_endpoint=" + server.endpoint,
                   "--retain_last=1", "--metrics_address=" + metrics});
  if (!daemon.ok()) return daemon.status();
  absl::StatusOr<std::vector<std::unique_ptr<ChildProcess>>> workers =
      StartWorkers(c, ws.socket, c.ranks, ws.bytes, {});
  if (!workers.ok()) return workers.status();
  absl::StatusOr<double> requests_before = RequestsSoFar(metrics);
  if (!requests_before.ok()) return requests_before.status();
  double persist = 0, load = 0;
  for (int round = 1; round <= 2; ++round) {
    absl::StatusOr<std::vector<std::vector<double>>> saved =
        Broadcast(*workers, absl::StrCat("blocking ", round, " durable"));
    if (!saved.ok()) return saved.status();
    const double p = MaxOver(*saved, 1);
    absl::StatusOr<std::vector<std::vector<double>>> loaded =
        Broadcast(*workers, absl::StrCat("load ", round, " durable"));
    if (!loaded.ok()) return loaded.status();
    const double l = MaxOver(*loaded, 0);
    absl::FPrintF(stderr, "ckpt-bench: round %d: persisted in %.3f s, loaded in %.3f s\n", round, p,
                  l);
    persist = round == 1 ? p : std::min(persist, p);
    load = round == 1 ? l : std::min(load, l);
  }
  absl::StatusOr<double> requests_after = RequestsSoFar(metrics);
  if (!requests_after.ok()) return requests_after.status();
  for (auto& w : *workers) (void)w->Send("quit");
  workers->clear();
  daemon->reset();

  f["s3_state_gib"] = gib;
  f["s3_persist_s"] = persist;
  f["s3_load_s"] = load;
  f["s3_persist_gbps"] = static_cast<double>(ws.bytes) / kGB / persist;
  f["s3_load_gbps"] = static_cast<double>(ws.bytes) / kGB / load;
  f["s3_requests_per_gib"] = (*requests_after - *requests_before) / (4 * gib);

  const std::string file = ws.work + "/baseline.bin";
  if (absl::Status s = WriteRandomFile(file, ws.bytes); !s.ok()) return s;
  double best_put = 0, best_get = 0;
  for (const char* tool : {"boto3", "awscli"}) {
    absl::FPrintF(stderr, "ckpt-bench: baseline %s...\n", tool);
    int rc = 0;
    absl::StatusOr<std::string> out =
        Capture(absl::StrCat(Source(".venv/bin/python"), " ", Source("tools/bench/s3_baseline.py"),
                             " ", tool, " ", server.endpoint, " ", bucket, " ", file),
                &rc);
    if (!out.ok()) return out.status();
    if (rc == 77) {
      absl::FPrintF(stderr, "ckpt-bench: %s is not installed: skipped\n", tool);
      continue;
    }
    double put = 0, get = 0;
    if (rc != 0 || std::sscanf(out->c_str(), "put_s %lf get_s %lf", &put, &get) != 2) {
      return absl::InternalError(absl::StrCat("baseline ", tool, " failed: ", *out));
    }
    const double put_gbps = static_cast<double>(ws.bytes) / kGB / put;
    const double get_gbps = static_cast<double>(ws.bytes) / kGB / get;
    f[absl::StrCat("s3_", tool, "_put_gbps")] = put_gbps;
    f[absl::StrCat("s3_", tool, "_get_gbps")] = get_gbps;
    best_put = std::max(best_put, put_gbps);
    best_get = std::max(best_get, get_gbps);
  }
  std::filesystem::remove(file);
  if (best_put == 0) return absl::FailedPreconditionError("no baseline client ran (boto3, awscli)");
  f["s3_baseline_put_gbps"] = best_put;
  f["s3_baseline_get_gbps"] = best_get;
  f["s3_persist_over_baseline"] = f["s3_persist_gbps"] / best_put;
  f["s3_load_over_baseline"] = f["s3_load_gbps"] / best_get;
  return absl::OkStatus();
}

}  // namespace

int RunS3(const Config& c) {
  Workspace ws(c);
  std::map<std::string, double> f;
  if (absl::Status s = Measure(c, ws, f); !s.ok()) return ws.Fail(s);
  std::error_code ec;
  std::filesystem::remove_all(ws.work, ec);
  absl::PrintF(
      "ckpt-bench --s3: %.2f GiB over %d ranks, %s\n", c.state_gib, c.ranks,
      c.s3_endpoint.empty() ? "Swift s3api on loopback (tools/dev/s3-server.sh)" : c.s3_endpoint);
  PrintFigures(f);
  PrintGoals({{"s3_persist_over_baseline", f["s3_persist_over_baseline"], 1.0},
              {"s3_load_over_baseline", f["s3_load_over_baseline"], 1.0}});
  if (c.json) {
    PrintJsonLine(
        absl::StrFormat("\"mode\":\"s3\",\"state_gib\":%.3f,\"ranks\":%d", c.state_gib, c.ranks),
        f);
  }
  return 0;
}

}  // namespace ckpt::bench
