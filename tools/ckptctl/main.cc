// ckptctl: the operator's command line for ckptd. Parses arguments, connects
// and hands over to one command in commands.h. Exit codes are listed there
// and in the --help footer: 0 success, 1 the operation failed, 2 usage error,
// 3 ckptd unreachable.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/ckptctl/cluster.h"
#include "tools/ckptctl/commands.h"
#include "tools/ckptctl/export.h"
#include "tools/ckptctl/gc.h"
#include "tools/ckptctl/import_safetensors.h"

namespace {

using ckpt::ctl::kExitUsage;

// Usage errors get the same one-line shape as every other error.
int UsageError(absl::string_view command, absl::string_view message) {
  std::cerr << "ckptctl: ";
  if (!command.empty()) std::cerr << command << ": ";
  std::cerr << message << " (see ckptctl --help)\n";
  return kExitUsage;
}

// Positive, and small enough that now + timeout cannot overflow the clock.
const CLI::Validator kTimeoutValidator(
    [](std::string& text) -> std::string {
      double seconds = 0;
      if (!CLI::detail::lexical_cast(text, seconds) || !(seconds > 0) || seconds > 365.0 * 86400) {
        return "want seconds, more than 0 and at most a year: " + text;
      }
      return "";
    },
    "SECONDS");

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckptctl: inspect and control a ckptd checkpoint daemon", "ckptctl"};
  app.footer(ckpt::ctl::kExitCodesHelp);
  app.require_subcommand(1);
  // Global options may also follow the subcommand.
  app.fallthrough();

  std::string socket_path(ckpt::ctl::kDefaultSocket);
  std::string address;
  std::optional<double> timeout_s;
  app.add_option("--socket", socket_path, "ckptd's Unix socket")->capture_default_str();
  app.add_option("--address", address,
                 "ckptd's TCP address HOST:PORT (TLS and a token); wins over --socket");
  ckpt::ctl::TcpCredentials tcp;
  tcp.token_file = std::getenv("CKPT_TOKEN_FILE") != nullptr ? std::getenv("CKPT_TOKEN_FILE") : "";
  app.add_option("--token-file", tcp.token_file,
                 "with --address: file holding ckptd's bearer token (default $CKPT_TOKEN_FILE)");
  app.add_option(
      "--tls-ca", tcp.tls_ca_file,
      "with --address: CA certificate (PEM) that signed ckptd's (default: system roots)");
  app.add_option("--timeout", timeout_s,
                 "seconds to wait for an answer (default 30; 3600 for verify and gc)")
      ->check(kTimeoutValidator);

  bool json = false;
  std::string job;
  std::string step_text = "latest";

  double mtbf_h = 0;
  CLI::App* status = app.add_subcommand("status", "show the daemon's state");
  status->add_flag("--json", json, "print the answer as JSON");
  status
      ->add_option("--mtbf_h", mtbf_h,
                   "the jobs' mean time between failures in hours: each job's line then "
                   "gives the checkpoint interval that pays (Young/Daly) and the time lost")
      ->check(CLI::PositiveNumber);

  double watch_interval_s = 1.0;
  CLI::App* watch = app.add_subcommand(
      "watch", "show the saves and loads in flight every --interval seconds until none are left");
  watch->add_option("--interval", watch_interval_s, "seconds between refreshes")
      ->check(kTimeoutValidator)
      ->capture_default_str();
  watch->add_flag("--json", json, "one JSON status per line");

  CLI::App* cluster = app.add_subcommand(
      "cluster", "the coordinator's hosts: heartbeat ages, pool use, saves/loads in flight");
  cluster->add_flag("--json", json, "print the answer as JSON");

  CLI::App* list = app.add_subcommand("list", "list a job's checkpoints");
  list->add_option("job", job, "job name")->required();
  list->add_flag("--json", json, "print the answer as JSON");

  CLI::App* inspect = app.add_subcommand("inspect", "print a checkpoint's manifest as JSON");
  inspect->add_option("job", job, "job name")->required();
  inspect->add_option("step", step_text, "step number or 'latest'")->capture_default_str();

  CLI::App* verify = app.add_subcommand("verify", "re-read a checkpoint and check every CRC");
  verify->add_option("job", job, "job name")->required();
  verify->add_option("step", step_text, "step number or 'latest'")->capture_default_str();
  verify->add_flag("--json", json, "print the answer as JSON");

  ckpt::ctl::ExportOptions export_options;
  std::string format = "safetensors";
  std::string max_shard_size = "5GB";
  CLI::App* export_command = app.add_subcommand(
      "export", "write a checkpoint as a safetensors model (reads the storage root directly)");
  export_command->add_option("job", job, "job name")->required();
  export_command->add_option("step", step_text, "step number or 'latest'")->capture_default_str();
  export_command->add_option("--format", format, "only safetensors")
      ->check(CLI::IsMember({"safetensors"}))
      ->capture_default_str();
  export_command->add_option("--out", export_options.out_dir, "directory to write")->required();
  export_command
      ->add_option("--storage-root", export_options.storage_root, "ckptd's --storage_root")
      ->capture_default_str();
  export_command->add_option("--s3-endpoint", export_options.s3.endpoint,
                             "S3 server of an s3:// root (ckptd's --s3_endpoint)");
  export_command->add_option("--s3-region", export_options.s3.region, "S3 region")
      ->capture_default_str();
  export_command->add_flag("--s3-virtual-host", export_options.s3.virtual_host,
                           "bucket.host addressing (ckptd's --s3_virtual_host)");
  export_command->add_option("--s3-ca-file", export_options.s3.ca_file,
                             "CA bundle for an https S3 endpoint");
  export_command->add_option("--s3-credentials-file", export_options.s3.credentials_file,
                             "AWS credentials file (else the AWS_* environment, ~/.aws)");
  export_command->add_option("--s3-profile", export_options.s3.profile,
                             "profile of the credentials file");
  export_command->add_option("--tensors", export_options.tensors_regex,
                             "only tensors whose name this regex finds");
  export_command->add_option("--rename", export_options.rename_file,
                             "JSON file {\"regex\": \"replacement\"} renaming tensors");
  export_command->add_option("--max-shard-size", max_shard_size, "largest file, e.g. 5GB")
      ->capture_default_str();
  std::string buffer_size = "64MiB";
  export_command
      ->add_option("--buffer-size", buffer_size,
                   "memory for a piece of a tensor: larger tensors stream through it")
      ->capture_default_str();

  ckpt::ctl::ImportOptions import_options;
  CLI::App* import_command = app.add_subcommand(
      "import", "save a directory of safetensors files as a checkpoint step (through ckptd)");
  import_command->add_option("dir", import_options.in_dir, "directory of *.safetensors")
      ->required();
  import_command->add_option("job", job, "job name")->required();
  import_command->add_option("step", step_text, "step number")->required();

  CLI::App* cancel = app.add_subcommand("cancel", "cancel a save in flight");
  cancel->add_option("job", job, "job name")->required();
  cancel->add_option("step", step_text, "step number")->required();

  std::string adopt_owner;
  bool adopt_replace = false;
  CLI::App* adopt = app.add_subcommand(
      "adopt", "give a job without an owner record to its owner (admin; never first-come)");
  adopt->add_option("job", job, "job name")->required();
  adopt
      ->add_option("owner", adopt_owner,
                   "user:NAME, user:UID, principal:NAME (a token's), or a user name or uid")
      ->required();
  adopt->add_flag("--replace", adopt_replace, "also when it has an owner (hands it over)");

  ckpt::ctl::GcOptions gc_options;
  CLI::App* gc = app.add_subcommand(
      "gc", "delete old checkpoints of a job, keeping LATEST and steps in use (through ckptd)");
  gc->add_option("job", gc_options.job, "job name")->required();
  gc->add_option("--keep-last", gc_options.keep_last, "keep the newest N steps that are not broken")
      ->required()
      ->check(CLI::PositiveNumber);
  gc->add_option("--keep-every", gc_options.keep_every, "also keep steps that are multiples of K")
      ->check(CLI::NonNegativeNumber);
  gc->add_option("--grace-s", gc_options.grace_s,
                 "keep steps committed less than S seconds ago (default: ckptd's --retain_grace_s)")
      ->check(CLI::NonNegativeNumber);
  gc->add_flag("--dry-run", gc_options.dry_run, "say what would be deleted; delete nothing");
  gc->add_flag("--delete-broken", gc_options.delete_broken,
               "delete broken steps too (kept by default: broken may mean unreadable right now)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and friends are "errors" that exit 0.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e);
    }
    const auto parsed = app.get_subcommands();
    return UsageError(parsed.empty() ? "" : parsed.front()->get_name(), e.what());
  }

  CLI::App* command = app.get_subcommands().front();
  const std::string name = command->get_name();

  int64_t step = -1;
  if (command == inspect || command == verify || command == cancel || command == export_command ||
      command == import_command) {
    auto parsed = ckpt::ctl::ParseStep(
        step_text, /*allow_latest=*/command != cancel && command != import_command);
    if (!parsed.ok()) return UsageError(name, parsed.status().message());
    step = *parsed;
  }

  if (command == export_command) {
    absl::StatusOr<uint64_t> size = ckpt::ctl::ParseSize(max_shard_size);
    if (!size.ok()) return UsageError(name, size.status().message());
    export_options.max_shard_bytes = *size;
    absl::StatusOr<uint64_t> buffer = ckpt::ctl::ParseSize(buffer_size);
    if (!buffer.ok()) return UsageError(name, buffer.status().message());
    export_options.piece_bytes = *buffer;
    export_options.job = job;
    export_options.step = step;
    absl::Status s = ckpt::ctl::ExportSafetensors(export_options, std::cout);
    if (!s.ok()) {
      std::cerr << "ckptctl export: " << s.ToString() << "\n";
      return 1;
    }
    return 0;
  }

  if (command == import_command) {
    import_options.socket_path = socket_path;
    import_options.job = job;
    import_options.step = step;
    absl::Status s = ckpt::ctl::ImportSafetensors(import_options, std::cout);
    if (!s.ok()) {
      std::cerr << "ckptctl import: " << s.ToString() << "\n";
      return 1;
    }
    return 0;
  }

  const std::chrono::seconds default_timeout = command == verify || command == gc
                                                   ? ckpt::ctl::kDefaultVerifyTimeout
                                                   : ckpt::ctl::kDefaultTimeout;
  const std::chrono::milliseconds timeout =
      timeout_s ? std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0))
                : std::chrono::milliseconds(default_timeout);

  const std::string target = ckpt::ctl::TargetFor(socket_path, address);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> made = ckpt::ctl::MakeChannel(target, tcp);
  if (!made.ok()) return UsageError(name, made.status().message());
  std::shared_ptr<grpc::Channel> channel = *made;
  auto stub = ckpt::v1::NodeService::NewStub(channel);

  ckpt::ctl::Call call;
  call.stub = stub.get();
  call.timeout = timeout;
  call.target = target;
  call.channel = channel.get();
  call.out = &std::cout;
  call.err = &std::cerr;

  if (command == status) return ckpt::ctl::RunStatus(call, json, mtbf_h);
  if (command == cluster) {
    auto cluster_stub = ckpt::v1::ClusterService::NewStub(channel);
    return ckpt::ctl::RunCluster(call, *cluster_stub, json);
  }
  if (command == list) return ckpt::ctl::RunList(call, job, json);
  if (command == inspect) return ckpt::ctl::RunInspect(call, job, step);
  if (command == verify) return ckpt::ctl::RunVerify(call, job, step, json);
  if (command == watch) {
    return ckpt::ctl::RunWatch(
        call, std::chrono::milliseconds(static_cast<int64_t>(watch_interval_s * 1000)), json);
  }
  if (command == gc) return ckpt::ctl::RunGc(call, gc_options);
  if (command == adopt) return ckpt::ctl::RunAdopt(call, job, adopt_owner, adopt_replace);
  return ckpt::ctl::RunCancel(call, job, step);
}
