#include "tools/bench/bench_run.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckpt::bench {

Workspace::Workspace(const Config& c)
    : bytes(static_cast<uint64_t>(c.state_gib * (1ull << 30))),
      work(absl::StrCat(c.dir, "/ckpt-bench-", getpid())),
      socket(absl::StrCat("/tmp/ckpt-bench-", getpid(), ".sock")) {
  std::filesystem::create_directories(work);
}

int Workspace::Fail(const absl::Status& s) const {
  absl::FPrintF(stderr, "ckpt-bench: %s\n", s.ToString());
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
  return 1;
}

std::string SelfPath() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

absl::StatusOr<std::vector<std::vector<double>>> Broadcast(
    std::vector<std::unique_ptr<ChildProcess>>& workers, const std::string& command) {
  for (auto& w : workers) {
    if (absl::Status s = w->Send(command); !s.ok()) return s;
  }
  std::vector<std::vector<double>> out;
  for (size_t r = 0; r < workers.size(); ++r) {
    absl::StatusOr<std::string> line = workers[r]->ReadLine();
    if (!line.ok()) return line.status();
    if (line->rfind("ok", 0) != 0) {
      return absl::InternalError(absl::StrCat("rank ", r, ": ", command, ": ", *line));
    }
    std::vector<double> numbers;
    std::istringstream in(line->substr(2));
    for (double x; in >> x;) numbers.push_back(x);
    out.push_back(std::move(numbers));
  }
  return out;
}

double MaxOver(const std::vector<std::vector<double>>& answers, size_t col) {
  double m = 0;
  for (const auto& a : answers) m = std::max(m, a.at(col));
  return m;
}

absl::StatusOr<std::vector<std::unique_ptr<ChildProcess>>> StartWorkers(
    const Config& c, const std::string& socket, int world, uint64_t bytes,
    const std::vector<std::string>& role_flags) {
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv = {SelfPath(),       "--worker",
                                     "--socket",       socket,
                                     "--rank",         std::to_string(r),
                                     "--world",        std::to_string(world),
                                     "--state-bytes",  std::to_string(bytes),
                                     "--copy-threads", std::to_string(c.copy_threads)};
    argv.insert(argv.end(), role_flags.begin(), role_flags.end());
    auto w = ChildProcess::Start(argv, /*merge_stderr=*/false);
    if (!w.ok()) return w.status();
    workers.push_back(std::move(*w));
  }
  for (auto& w : workers) {
    if (absl::Status s = w->WaitFor("ready"); !s.ok()) return s;
  }
  return workers;
}

uint64_t PoolBytes(const Config& c, uint64_t bytes) {
  return c.pool_gib > 0 ? static_cast<uint64_t>(c.pool_gib * (1ull << 30)) / 4096 * 4096
                        : (2 * bytes + (512ull << 20)) / 4096 * 4096;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> StartDaemon(const Config& c, const std::string& work,
                                                          const std::string& socket, uint64_t pool,
                                                          std::vector<std::string> extra_flags) {
  std::vector<std::string> argv = {c.ckptd,
                                   "--storage_root=" + work + "/root",
                                   "--socket_path=" + socket,
                                   absl::StrCat("--pool_bytes=", pool),
                                   absl::StrCat("--writer_threads=", c.writer_threads),
                                   absl::StrCat("--writer_nice=", c.writer_nice),
                                   absl::StrCat("--batch_bytes=", uint64_t(c.batch_mib) << 20)};
  if (c.reader_threads > 0) argv.push_back(absl::StrCat("--reader_threads=", c.reader_threads));
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  auto daemon = ChildProcess::Start(argv, /*merge_stderr=*/true);
  if (!daemon.ok()) return daemon.status();
  if (absl::Status s = (*daemon)->WaitFor("ckptd: serving"); !s.ok()) return s;
  return daemon;
}

void PrintFigures(const std::map<std::string, double>& f) {
  for (const auto& [k, v] : f) absl::PrintF("  %-28s %10.3f\n", k, v);
}

void PrintGoals(const std::vector<Goal>& goals) {
  for (const Goal& g : goals) {
    const bool pass = g.at_most ? g.value <= g.limit : g.value >= g.limit;
    absl::PrintF("  %-36s %8.3f  (%s %.2f)  %s\n", g.name, g.value,
                 g.at_most ? "<=" : ">=", g.limit, pass ? "ok" : "MISSED");
  }
}

void PrintJsonLine(const std::string& head, const std::map<std::string, double>& f) {
  std::string line = "{" + head;
  for (const auto& [k, v] : f) {
    absl::StrAppendFormat(&line, "%s\"%s\":%.4f", line.size() > 1 ? "," : "", k, v);
  }
  absl::PrintF("%s}\n", line);
}

}  // namespace ckpt::bench
