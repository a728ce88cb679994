// A rank's Client outlives its ckptd: the daemon is SIGKILLed and started
// again on the same root and socket, and the same Client object's next call
// attaches again by itself. Saves after the restart commit, and loads give
// back, bit-exact, both the step saved before the crash and the one after.
// While the daemon is down, calls fail at once with an error naming the
// daemon's socket instead of waiting out a deadline.
#include <signal.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "ckpt/client.h"
#include "tests/catch.h"
#include "tests/support/test_daemon.h"
#include "tools/demo/model_layout.h"
#include "tools/demo/tensor_pattern.h"

namespace ckpt::testing {
namespace {

// A fail-fast call to a socket nobody serves fails in milliseconds; this
// is far below every deadline the client sets (30 s and more).
constexpr absl::Duration kDownBound = absl::Seconds(5);

// One rank's state: the demo model's tensors with their own buffers.
struct RankState {
  std::vector<HostTensor> tensors;
  std::vector<std::vector<char>> buffers;

  RankState() : tensors(SaveLayout(0, 1, 1)) {
    for (HostTensor& t : tensors) {
      absl::StatusOr<std::vector<char>> data = PatternShard(t);
      REQUIRE(data.ok());
      buffers.push_back(std::move(*data));
      t.data = buffers.back().data();
    }
  }
  // Different contents for a later step, so a load shows which step it read.
  void Invert() {
    for (std::vector<char>& b : buffers) {
      for (char& c : b) c = static_cast<char>(~c);
    }
  }
  void Zero() {
    for (std::vector<char>& b : buffers) std::memset(b.data(), 0, b.size());
  }
  bool operator==(const RankState& other) const { return buffers == other.buffers; }
};

std::unique_ptr<Client> AttachRank(const TestDaemon& d, const std::string& job) {
  ClientOptions options;
  options.socket_path = d.socket();
  options.job = job;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Attach(options);
  INFO(client.status().ToString());
  REQUIRE(client.ok());
  return std::move(*client);
}

void SaveAndCommit(Client& client, int64_t step, const RankState& state, const std::string& note) {
  absl::StatusOr<std::shared_ptr<SaveHandle>> handle =
      client.Save(step, state.tensors, {{"note", false, note}});
  INFO("save of step " << step << ": " << handle.status().ToString());
  REQUIRE(handle.ok());
  absl::Status persisted = (*handle)->WaitPersisted();
  INFO(persisted.ToString());
  REQUIRE(persisted.ok());
}

// Loads `step` into zeroed buffers and checks every byte against `expected`.
void LoadAndCompare(Client& client, int64_t step, int64_t expected_step, const RankState& expected,
                    const std::string& expected_note) {
  RankState into;
  into.Zero();
  std::string note;
  absl::StatusOr<int64_t> loaded = client.Load(step, into.tensors, {{"note", &note}});
  INFO("load of step " << step << ": " << loaded.status().ToString());
  REQUIRE(loaded.ok());
  CHECK(*loaded == expected_step);
  CHECK(into == expected);
  CHECK(note == expected_note);
}

// Both client calls while no daemon serves the socket: an error that says
// what and where, quickly. The save may run on the old session if the client
// has not yet seen the daemon's death (another thread notices it); then it
// fails on the broken connection rather than in attaching.
void CheckDownCallsFail(Client& client, const TestDaemon& d, const RankState& state) {
  absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<SaveHandle>> handle = client.Save(2, state.tensors, {});
  absl::Status saved = handle.ok() ? (*handle)->WaitPersisted() : handle.status();
  absl::Duration took = absl::Now() - start;
  INFO("save while ckptd is down: " << saved.ToString() << " after " << took);
  CHECK(absl::IsUnavailable(saved));
  CHECK(saved.message().find("save of job reattach step 2 by rank 0") != std::string::npos);
  CHECK(saved.message().find("ckptd at unix:" + d.socket()) != std::string::npos);
  CHECK(took < kDownBound);

  RankState into;
  start = absl::Now();
  absl::StatusOr<int64_t> loaded = client.Load(kLatestStep, into.tensors);
  took = absl::Now() - start;
  INFO("load while ckptd is down: " << loaded.status().ToString() << " after " << took);
  // By now the client knows the daemon is gone: the load attaches first.
  CHECK(absl::IsUnavailable(loaded.status()));
  CHECK(loaded.status().message().find("load of job") != std::string::npos);
  CHECK(loaded.status().message().find("attach to ckptd at unix:" + d.socket()) !=
        std::string::npos);
  CHECK(took < kDownBound);
}

}  // namespace

TEST_CASE("a client re-attaches to a restarted ckptd on its next call",
          "[fault][liveness][reattach]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  const std::string job = "reattach";
  std::unique_ptr<Client> client = AttachRank(d, job);
  RankState step1;
  SaveAndCommit(*client, 1, step1, "one");

  const ExitInfo killed = d.Kill();
  REQUIRE(killed.signal == SIGKILL);

  SECTION("restarted at once: the next save attaches again and commits") {}
  SECTION("calls while it is down fail fast, and the first one after the restart works") {
    CheckDownCallsFail(*client, d, step1);
  }

  REQUIRE(d.Start().ok());
  RankState step3;
  step3.Invert();
  SaveAndCommit(*client, 3, step3, "three");
  // The new session is the only one: the old one died with the daemon.
  CHECK(d.Status().attached_ranks() == 1);
  LoadAndCompare(*client, kLatestStep, 3, step3, "three");
  LoadAndCompare(*client, 1, 1, step1, "one");
}

TEST_CASE("a client re-attaches for a load after ckptd restarted", "[fault][liveness][reattach]") {
  TestDaemon d;
  REQUIRE(d.Start().ok());
  const std::string job = "reattach-load";
  std::unique_ptr<Client> client = AttachRank(d, job);
  RankState step1;
  SaveAndCommit(*client, 1, step1, "one");
  REQUIRE(d.Kill().signal == SIGKILL);
  REQUIRE(d.Start().ok());
  // A load as the first call after the restart.
  LoadAndCompare(*client, kLatestStep, 1, step1, "one");
  CHECK(d.Status().attached_ranks() == 1);
}

}  // namespace ckpt::testing
