// ckptctl's commands, one function each. They take the NodeService stub and
// the streams to print on, so that tests can run them against a fake daemon;
// main.cc only parses the command line and calls one of them.
//
// Thread-safety: the functions share no state; each call is independent.
#ifndef CKPT_TOOLS_CKPTCTL_COMMANDS_H_
#define CKPT_TOOLS_CKPTCTL_COMMANDS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ckpt/v1/node.grpc.pb.h"

namespace ckpt::ctl {

// Exit codes. Scripts depend on them: never renumber.
//   0  success
//   1  the operation failed: the daemon answered with an error (not found,
//      verification failed, invalid argument, timed out while working, ...)
//   2  usage error: bad command line or step
//   3  the daemon is unreachable: UNAVAILABLE, or DEADLINE_EXCEEDED before a
//      connection was made
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;

// The table above as printed in the `ckptctl --help` footer.
extern const char kExitCodesHelp[];

inline constexpr absl::string_view kDefaultSocket = "/run/ckptd/ckptd.sock";
inline constexpr std::chrono::seconds kDefaultTimeout{30};
// Verify re-reads the whole checkpoint, which takes a while for a large one.
inline constexpr std::chrono::seconds kDefaultVerifyTimeout{3600};

// "host:port" when address is set, "unix:<socket>" otherwise.
std::string TargetFor(absl::string_view socket_path, absl::string_view address);

// How to reach ckptd over TCP: TLS, checked against `tls_ca_file` (PEM; the
// system's roots when empty), with the bearer token in `token_file`.
struct TcpCredentials {
  std::string tls_ca_file;
  std::string token_file;
};

// A channel to target that accepts answers of any size (a large model's
// manifest passes gRPC's 4 MiB default): plaintext for a unix: target,
// TLS with the token for TCP. Nothing is dialled yet. INVALID_ARGUMENT
// naming the file when the CA or token file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const TcpCredentials& tcp = {});

// "latest" -> -1, a non-negative decimal step -> itself; anything else is
// INVALID_ARGUMENT. allow_latest = false rejects "latest" too.
absl::StatusOr<int64_t> ParseStep(absl::string_view text, bool allow_latest = true);

// Human units: "512 B", "1.5 GiB"; "1d 2h 3m 4s"; "2024-05-01T12:00:00.123Z".
std::string FormatBytes(uint64_t bytes);
std::string FormatDuration(uint64_t seconds);
std::string FormatUtcMillis(int64_t unix_ms);

// What every command needs besides its own arguments.
struct Call {
  v1::NodeService::StubInterface* stub = nullptr;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  std::string target;  // only for messages
  // Optional. A DEADLINE_EXCEEDED counts as unreachable (exit 3) unless this
  // channel is READY afterwards, which means the daemon was there but slow.
  grpc::ChannelInterface* channel = nullptr;
  std::ostream* out = nullptr;  // results
  std::ostream* err = nullptr;  // one line per error: "ckptctl: <cmd>: <msg>"
};

// Each returns an exit code from the table above.
// mtbf_h > 0: each job's checkpoint cost line adds the Young/Daly interval.
int RunStatus(const Call& call, bool json, double mtbf_h = 0);
// The saves and loads in flight with phase, bytes, rate and ETA.
void PrintInFlight(std::ostream& out, const v1::GetStatusResponse& response);
// Each job's checkpoint cost; with mtbf_s > 0, the Young/Daly interval and
// the time lost at it and at the job's current interval.
void PrintJobCosts(std::ostream& out, const v1::GetStatusResponse& response, double mtbf_s);
// One line for a save or load in flight: job, step, phase, bytes done of
// the total, rate and ETA, ranks (status and cluster print them).
std::string DescribeSave(const v1::SaveProgress& save);
std::string DescribeLoad(const v1::LoadProgress& load);
// Status every `interval` until no save or load is in flight (exit 0).
int RunWatch(const Call& call, std::chrono::milliseconds interval, bool json);
int RunList(const Call& call, const std::string& job, bool json);
// Prints the manifest as pretty JSON.
int RunInspect(const Call& call, const std::string& job, int64_t step);
int RunVerify(const Call& call, const std::string& job, int64_t step, bool json = false);
int RunCancel(const Call& call, const std::string& job, int64_t step);
int RunAdopt(const Call& call, const std::string& job, const std::string& owner, bool replace);

// For commands in other files (gc.h): one RPC with the call's deadline, and
// the exit code and error line of a failed one.
grpc::Status InvokeRpc(const Call& call,
                       const std::function<grpc::Status(grpc::ClientContext*)>& rpc);
int FailedRpc(const Call& call, absl::string_view command, const grpc::Status& rpc);
// The message as pretty JSON (proto field names) on call.out.
int PrintMessageJson(const Call& call, absl::string_view command,
                     const google::protobuf::Message& message);

}  // namespace ckpt::ctl

#endif  // CKPT_TOOLS_CKPTCTL_COMMANDS_H_
