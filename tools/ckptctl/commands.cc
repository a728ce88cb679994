#include "tools/ckptctl/commands.h"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <fstream>
#include <functional>
#include <ostream>
#include <thread>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "proto/lib/grpc_status.h"
#include "tools/ckptctl/checkpoint_interval.h"

namespace ckpt::ctl {

const char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0  success\n"
    "  1  the operation failed (ckptd answered with an error: not found,\n"
    "     verification failed, ...)\n"
    "  2  usage error (bad command line or step)\n"
    "  3  ckptd unreachable (nothing listens, or no connection before the\n"
    "     timeout)";

namespace {

// Error lines must stay one line even when a message carries newlines.
std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
}

std::string FormatSeconds(std::chrono::milliseconds ms) {
  return absl::StrFormat("%gs", ms.count() / 1000.0);
}

std::string Percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string StepText(int64_t step) { return step < 0 ? "latest" : absl::StrCat(step); }

void PrintError(const Call& call, absl::string_view command, absl::string_view message) {
  *call.err << "ckptctl: " << command << ": " << OneLine(message) << "\n";
}

// Maps a failed RPC to an exit code and prints its one-line message.
int Fail(const Call& call, absl::string_view command, const grpc::Status& rpc) {
  const absl::Status status = FromGrpcStatus(rpc);
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
      PrintError(call, command,
                 absl::StrCat("cannot reach ckptd at ", call.target, ": ", status.message()));
      return kExitUnreachable;
    case absl::StatusCode::kDeadlineExceeded:
      // A READY channel means the daemon took the call but did not finish
      // in time; anything else means we never got through to it.
      if (call.channel != nullptr && call.channel->GetState(false) == GRPC_CHANNEL_READY) {
        PrintError(call, command,
                   absl::StrCat("no answer from ckptd within ", FormatSeconds(call.timeout),
                                " (raise --timeout to wait longer)"));
        return kExitFailed;
      }
      PrintError(call, command,
                 absl::StrCat("cannot reach ckptd at ", call.target, " within ",
                              FormatSeconds(call.timeout)));
      return kExitUnreachable;
    default:
      PrintError(call, command,
                 absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message()));
      return kExitFailed;
  }
}

grpc::Status Invoke(const Call& call,
                    const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + call.timeout);
  return rpc(&context);
}

int PrintJson(const Call& call, absl::string_view command,
              const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  // The manifest is an on-disk format documented by its .proto: keep its
  // field names rather than the lowerCamelCase of the JSON mapping.
  options.preserve_proto_field_names = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    PrintError(call, command,
               absl::StrCat("cannot render the answer as JSON: ", status.ToString()));
    return kExitFailed;
  }
  *call.out << json;
  if (json.empty() || json.back() != '\n') *call.out << "\n";
  return kExitOk;
}

}  // namespace

std::string TargetFor(absl::string_view socket_path, absl::string_view address) {
  if (!address.empty()) return std::string(address);
  return absl::StrCat("unix:", socket_path);
}

namespace {

// A small file named by a flag (a CA bundle, a token), read whole.
absl::StatusOr<std::string> ReadFlagFile(const std::string& path, const char* flag) {
  constexpr std::streamsize kMaxBytes = 4 << 20;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot open ", path));
  std::string text(static_cast<size_t>(kMaxBytes) + 1, '\0');
  in.read(text.data(), kMaxBytes + 1);
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<std::streamsize>(text.size()) > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is larger than 4 MiB"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const TcpCredentials& tcp) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  if (absl::StartsWith(target, "unix:")) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions ssl;
  if (!tcp.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadFlagFile(tcp.tls_ca_file, "--tls-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (!tcp.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadFlagFile(tcp.token_file, "--token-file");
    if (!token.ok()) return token.status();
    credentials = grpc::CompositeChannelCredentials(
        credentials, grpc::AccessTokenCredentials(std::string(absl::StripAsciiWhitespace(*token))));
  }
  return grpc::CreateCustomChannel(target, credentials, args);
}

absl::StatusOr<int64_t> ParseStep(absl::string_view text, bool allow_latest) {
  if (allow_latest && text == "latest") return -1;
  const bool digits_only = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  int64_t step = 0;
  if (digits_only) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
    if (ec == std::errc() && end == text.data() + text.size()) return step;
  }
  return absl::InvalidArgumentError(absl::StrCat("invalid step \"", text,
                                                 "\": want a non-negative integer",
                                                 allow_latest ? " or \"latest\"" : ""));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatDuration(uint64_t seconds) {
  const uint64_t days = seconds / 86400;
  const uint64_t hours = seconds / 3600 % 24;
  const uint64_t minutes = seconds / 60 % 60;
  const uint64_t secs = seconds % 60;
  if (days > 0) return absl::StrFormat("%dd %dh %dm %ds", days, hours, minutes, secs);
  if (hours > 0) return absl::StrFormat("%dh %dm %ds", hours, minutes, secs);
  if (minutes > 0) return absl::StrFormat("%dm %ds", minutes, secs);
  return absl::StrFormat("%ds", secs);
}

std::string FormatUtcMillis(int64_t unix_ms) {
  // Floor division so that times before 1970 stay correct.
  int64_t secs = unix_ms / 1000;
  int64_t millis = unix_ms % 1000;
  if (millis < 0) {
    millis += 1000;
    secs -= 1;
  }
  const std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return absl::StrCat(unix_ms, "ms");
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
}

namespace {

// "12.3 MB/s, ETA 4 s" from bytes done of a total over the time so far.
std::string RateAndEta(uint64_t done, uint64_t total, uint64_t elapsed_ms) {
  if (elapsed_ms == 0 || done == 0) return "rate -, ETA -";
  const double rate = done * 1000.0 / elapsed_ms;  // bytes per second
  std::string eta = "-";
  if (total >= done)
    eta = FormatSeconds(
        std::chrono::milliseconds(static_cast<int64_t>((total - done) / rate * 1000)));
  return absl::StrCat(FormatBytes(static_cast<uint64_t>(rate)), "/s, ETA ", eta);
}

}  // namespace

std::string DescribeSave(const v1::SaveProgress& save) {
  return absl::StrFormat("save job %s step %d: %s, %s / %s (%s), %s, ranks %d/%d snapshotted",
                         save.job(), save.step(), save.phase().empty() ? "?" : save.phase(),
                         FormatBytes(save.bytes_written()), FormatBytes(save.bytes_total()),
                         Percent(save.bytes_written(), save.bytes_total()),
                         RateAndEta(save.bytes_written(), save.bytes_total(), save.elapsed_ms()),
                         save.ranks_snapshotted(), save.world_size());
}

std::string DescribeLoad(const v1::LoadProgress& load) {
  return absl::StrFormat(
      "load job %s step %s: %s, %s / %s read (%s), %s, ranks %d/%d arrived", load.job(),
      load.step() < 0 ? std::string("latest") : absl::StrCat(load.step()), load.phase(),
      FormatBytes(load.bytes_read()), FormatBytes(load.bytes_total()),
      Percent(load.bytes_read(), load.bytes_total()),
      RateAndEta(load.bytes_read(), load.bytes_total(), load.elapsed_ms()), load.ranks_arrived(),
      load.world_size());
}

void PrintInFlight(std::ostream& out, const v1::GetStatusResponse& response) {
  if (response.saves().empty()) {
    out << "saves in flight: none\n";
  } else {
    out << "saves in flight: " << response.saves_size() << "\n";
  }
  for (const v1::SaveProgress& save : response.saves()) out << "  " << DescribeSave(save) << "\n";
  if (response.loads().empty()) {
    out << "loads in flight: "
        << (response.loads_in_flight() == 0 ? "none" : absl::StrCat(response.loads_in_flight()))
        << "\n";
  } else {
    out << "loads in flight: " << response.loads_size() << "\n";
  }
  for (const v1::LoadProgress& load : response.loads()) out << "  " << DescribeLoad(load) << "\n";
}

// The stall taken is a blocking save's (snapshot_s): a lazy save's is
// smaller, so the interval shown is an upper bound.
void PrintJobCosts(std::ostream& out, const v1::GetStatusResponse& response, double mtbf_s) {
  if (response.job_costs().empty()) return;
  out << "checkpoint cost by job (smoothed over its last saves):\n";
  for (const v1::JobCheckpointCost& c : response.job_costs()) {
    std::string line = absl::StrFormat(
        "  job %s: %d saves, snapshot %.3f s, committed in %.3f s, every %s", c.job(), c.saves(),
        c.snapshot_s(), c.persist_s(),
        c.interval_s() > 0 ? absl::StrFormat("%.1f s", c.interval_s()) : std::string("-"));
    if (mtbf_s > 0) {
      const double best = YoungDalyInterval(c.snapshot_s(), mtbf_s);
      absl::StrAppendFormat(&line, "; Young/Daly at MTBF %.1f h: every %.1f s", mtbf_s / 3600,
                            best);
      if (best > 0) {
        absl::StrAppendFormat(&line, " (%.2f%% lost",
                              100 * ExpectedWaste(best, c.snapshot_s(), mtbf_s));
        if (c.interval_s() > 0) {
          absl::StrAppendFormat(&line, ", %.2f%% at the current interval",
                                100 * ExpectedWaste(c.interval_s(), c.snapshot_s(), mtbf_s));
        }
        line += ")";
      }
    }
    out << line << "\n";
  }
}

int RunStatus(const Call& call, bool json, double mtbf_h) {
  v1::GetStatusRequest request;
  v1::GetStatusResponse response;
  const grpc::Status rpc = Invoke(call, [&](grpc::ClientContext* context) {
    return call.stub->GetStatus(context, request, &response);
  });
  if (!rpc.ok()) return Fail(call, "status", rpc);
  if (json) return PrintJson(call, "status", response);

  std::ostream& out = *call.out;
  const auto line = [&out](absl::string_view label, absl::string_view value) {
    out << absl::StrFormat("  %-22s %s\n", label, value);
  };
  out << "ckptd " << response.version() << " on " << response.host() << "\n";
  line("storage root", response.storage_root());
  line("uptime", FormatDuration(response.uptime_seconds()));
  line("pool", absl::StrFormat("%s / %s used (%s)", FormatBytes(response.pool_used_bytes()),
                               FormatBytes(response.pool_bytes()),
                               Percent(response.pool_used_bytes(), response.pool_bytes())));
  line("pool stall", absl::StrFormat("%.1f s waited in all, %d waiting now",
                                     response.pool_stall_ms() / 1000.0, response.pool_waiters()));
  line("gpu", response.gpu_available() ? "yes" : "no");
  line("attached ranks", absl::StrCat(response.attached_ranks()));
  line("bytes written", FormatBytes(response.storage_bytes_written()));
  line("bytes read", FormatBytes(response.storage_bytes_read()));
  line("checkpoints committed", absl::StrCat(response.checkpoints_committed()));
  if (response.memory_tier_budget_bytes() > 0) {
    line("memory tier",
         absl::StrFormat(
             "%s / %s held (%s)", FormatBytes(response.memory_tier_bytes()),
             FormatBytes(response.memory_tier_budget_bytes()),
             Percent(response.memory_tier_bytes(), response.memory_tier_budget_bytes())));
    line("memory bytes read",
         absl::StrFormat("%s (%s of it copied in place, %s verified before the load)",
                         FormatBytes(response.memory_bytes_read()),
                         FormatBytes(response.memory_bytes_in_place()),
                         FormatBytes(response.memory_bytes_checked_early())));
    line("memory persisted",
         absl::StrFormat("%d steps to storage, %d failed", response.memory_persists(),
                         response.memory_persist_failures()));
    line("load fallbacks", absl::StrFormat("%d chunks read from storage after failing in memory",
                                           response.load_fallback_chunks()));
    for (const v1::MemoryTierJob& job : response.memory_tier_jobs()) {
      const std::string kept =
          job.erasure().empty()
              ? absl::StrFormat("%d cop%s", job.copies(), job.copies() == 1 ? "y" : "ies")
              : absl::StrCat("erasure coded ", job.erasure());
      line(absl::StrCat("  job ", job.job()),
           absl::StrFormat("steps [%s] in memory, %s, %s", absl::StrJoin(job.steps(), ", "),
                           FormatBytes(job.bytes()), kept));
    }
  }
  PrintJobCosts(out, response, mtbf_h * 3600);
  PrintInFlight(out, response);
  return kExitOk;
}

int RunWatch(const Call& call, std::chrono::milliseconds interval, bool json) {
  for (;;) {
    v1::GetStatusRequest request;
    v1::GetStatusResponse response;
    const grpc::Status rpc = Invoke(call, [&](grpc::ClientContext* context) {
      return call.stub->GetStatus(context, request, &response);
    });
    if (!rpc.ok()) return Fail(call, "watch", rpc);
    if (json) {
      // One object per line (JSON Lines), for scripts that follow along.
      std::string line;
      google::protobuf::util::JsonPrintOptions options;
      options.always_print_primitive_fields = true;
      options.preserve_proto_field_names = true;  // as PrintJson
      (void)google::protobuf::util::MessageToJsonString(response, &line, options);
      *call.out << line << "\n";
    } else {
      *call.out << FormatUtcMillis(absl::ToUnixMillis(absl::Now())) << "\n";
      PrintInFlight(*call.out, response);
    }
    call.out->flush();
    if (response.saves().empty() && response.loads().empty()) return kExitOk;
    std::this_thread::sleep_for(interval);
  }
}

int RunList(const Call& call, const std::string& job, bool json) {
  v1::ListCheckpointsRequest request;
  request.set_job(job);
  v1::ListCheckpointsResponse response;
  const grpc::Status rpc = Invoke(call, [&](grpc::ClientContext* context) {
    return call.stub->ListCheckpoints(context, request, &response);
  });
  if (!rpc.ok()) return Fail(call, "list", rpc);
  if (json) return PrintJson(call, "list", response);

  std::ostream& out = *call.out;
  if (response.checkpoints().empty()) {
    out << "no checkpoints for job " << job << "\n";
    return kExitOk;
  }
  std::vector<const v1::CheckpointSummary*> rows;
  for (const auto& summary : response.checkpoints()) rows.push_back(&summary);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto* a, const auto* b) { return a->step() < b->step(); });
  const auto columns = [](absl::string_view step, absl::string_view created, absl::string_view size,
                          absl::string_view tensors, absl::string_view objects,
                          absl::string_view tiers) {
    return absl::StrFormat("%12s  %-24s  %10s  %8s  %8s  %-14s", step, created, size, tensors,
                           objects, tiers);
  };
  out << columns("STEP", "CREATED (UTC)", "SIZE", "TENSORS", "OBJECTS", "TIERS") << "\n";
  for (const v1::CheckpointSummary* row : rows) {
    // Where the step is: memory (the daemon's memory tier), durable, or both.
    const std::string tiers = row->tiers().empty() ? "durable" : absl::StrJoin(row->tiers(), "+");
    if (row->broken()) {
      // One line, whatever the reason holds: it comes from a file on disk.
      std::string reason = row->broken_reason();
      std::replace(reason.begin(), reason.end(), '\n', ' ');
      out << columns(absl::StrCat(row->step()), "BROKEN", "-", "-", "-", tiers)
          << (row->latest() ? "  latest" : "") << "  " << reason << "\n";
      continue;
    }
    out << columns(absl::StrCat(row->step()),
                   row->created_unix_ms() == 0 ? "-" : FormatUtcMillis(row->created_unix_ms()),
                   FormatBytes(row->bytes()), absl::StrCat(row->tensors()),
                   absl::StrCat(row->objects()), tiers);
    // The chain: a delta step loads only with its base (kept by gc with it).
    if (row->has_delta_base_step()) out << "  delta of " << row->delta_base_step();
    out << (row->latest() ? "  latest\n" : "\n");
  }
  return kExitOk;
}

int RunInspect(const Call& call, const std::string& job, int64_t step) {
  v1::InspectCheckpointRequest request;
  request.set_job(job);
  request.set_step(step);
  v1::InspectCheckpointResponse response;
  const grpc::Status rpc = Invoke(call, [&](grpc::ClientContext* context) {
    return call.stub->InspectCheckpoint(context, request, &response);
  });
  if (!rpc.ok()) return Fail(call, "inspect", rpc);
  return PrintJson(call, "inspect", response.manifest());
}

int RunVerify(const Call& call, const std::string& job, int64_t step, bool json) {
  v1::VerifyCheckpointRequest request;
  request.set_job(job);
  request.set_step(step);
  v1::VerifyCheckpointResponse response;
  const grpc::Status rpc = Invoke(call, [&](grpc::ClientContext* context) {
    return call.stub->VerifyCheckpoint(context, request, &response);
  });
  if (!rpc.ok()) return Fail(call, "verify", rpc);
  if (json) return PrintJson(call, "verify", response);
  *call.out << "OK: " << response.chunks_checked() << " chunks, " << response.bytes_checked()
            << " bytes verified\n";
  // A memory-tier step spread over hosts: every host's copies.
  for (const auto& host : response.hosts()) {
    *call.out << "  host " << host.host() << ": " << host.files() << " files ok, " << host.chunks()
              << " chunks, " << host.bytes() << " bytes";
    if (host.parity_shares() > 0) *call.out << ", " << host.parity_shares() << " parity shares";
    *call.out << "\n";
  }
  return kExitOk;
}

int RunCancel(const Call& call, const std::string& job, int64_t step) {
  v1::CancelSaveRequest request;
  request.set_job(job);
  request.set_step(step);
  v1::CancelSaveResponse response;
  const grpc::Status rpc = Invoke(call, [&](grpc::ClientContext* context) {
    return call.stub->CancelSave(context, request, &response);
  });
  if (!rpc.ok()) return Fail(call, "cancel", rpc);
  *call.out << "cancelled job " << job << " step " << StepText(step) << "\n";
  return kExitOk;
}

int RunAdopt(const Call& call, const std::string& job, const std::string& owner, bool replace) {
  v1::AdoptJobRequest request;
  request.set_job(job);
  request.set_owner(owner);
  request.set_replace(replace);
  v1::AdoptJobResponse response;
  const grpc::Status rpc = Invoke(call, [&](grpc::ClientContext* context) {
    return call.stub->AdoptJob(context, request, &response);
  });
  if (!rpc.ok()) return Fail(call, "adopt", rpc);
  *call.out << "job " << job << " now belongs to " << response.owner();
  if (!response.previous_owner().empty()) *call.out << " (was " << response.previous_owner() << ")";
  *call.out << "\n";
  return kExitOk;
}

grpc::Status InvokeRpc(const Call& call,
                       const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
  return Invoke(call, rpc);
}

int FailedRpc(const Call& call, absl::string_view command, const grpc::Status& rpc) {
  return Fail(call, command, rpc);
}

int PrintMessageJson(const Call& call, absl::string_view command,
                     const google::protobuf::Message& message) {
  return PrintJson(call, command, message);
}

}  // namespace ckpt::ctl
