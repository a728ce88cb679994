#include "daemon/tier/spread_persist.h"

#include <cstdio>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "daemon/coordinator/commit.h"
#include "daemon/fault/fault_points.h"
#include "daemon/planning/manifest_check.h"
#include "daemon/planning/manifest_io.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/lib/status_context.h"
#include "proto/lib/validation.h"

namespace ckpt::tier {
namespace {

// How often a wait looks for lost hosts, the deadline and a caller gone.
constexpr absl::Duration kCheckEvery = absl::Milliseconds(200);

// The host whose data file this is ("data/<host>-<writer>.bin"): a host name
// may hold '-', a writer number never does.
std::string FileHost(const std::string& file) {
  absl::string_view name = file;
  if (!absl::ConsumePrefix(&name, "data/")) return "";
  const size_t dash = name.rfind('-');
  return dash == absl::string_view::npos ? "" : std::string(name.substr(0, dash));
}

}  // namespace

SpreadPersists::SpreadPersists(coordinator::Coordinator& durable, SpreadPersistOptions options)
    : durable_(durable), options_(std::move(options)) {}

SpreadPersists::~SpreadPersists() { Stop(); }

std::string SpreadPersists::Who(const Copy& copy) const {
  return absl::StrCat("the durable copy of step ", copy.manifest.step(), " of job ",
                      copy.manifest.job(), " (spread over ", copy.hosts.size(), " hosts)");
}

void SpreadPersists::FailLocked(Copy& copy, absl::Status status) {
  if (copy.failure.ok() && !copy.ended) copy.failure = std::move(status);
}

absl::StatusOr<v1::SpreadPersistDir> SpreadPersists::Open(const v1::SpreadPersistOpen& request,
                                                          const coordinator::CallerGone& gone) {
  const std::string& host = request.host().host();
  if (absl::Status s = ValidateName("host", host); !s.ok()) return s;
  v1::CheckpointManifest manifest;
  if (!manifest.ParseFromString(request.manifest())) {
    return absl::InvalidArgumentError(
        absl::StrCat("host ", host, " sent a manifest that does not parse"));
  }
  if (absl::Status s = ValidateName("job", manifest.job()); !s.ok()) return s;
  if (absl::Status s =
          planning::ValidateManifest(manifest, manifest.job(), manifest.step(),
                                     absl::StrCat("the manifest host ", host, " sent"));
      !s.ok()) {
    return s;
  }
  std::set<std::string> hosts;
  for (const v1::HostIdentity& h : manifest.topology().hosts()) hosts.insert(h.host());
  if (!hosts.contains(host)) {
    return absl::InvalidArgumentError(absl::StrCat("host ", host, " is not a host of step ",
                                                   manifest.step(), " of job ", manifest.job()));
  }
  std::shared_ptr<Copy> copy;
  std::vector<std::thread> finished;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the coordinator's ckptd is shutting down");
    const std::pair<std::string, int64_t> key(manifest.job(), manifest.step());
    auto same_save = [&](const Copy& c) {
      return c.manifest.job() == manifest.job() && c.manifest.step() == manifest.step() &&
             c.manifest.created_unix_ms() == manifest.created_unix_ms();
    };
    if (auto it = by_step_.find(key); it != by_step_.end()) {
      if (!same_save(*it->second)) {
        return absl::FailedPreconditionError(
            absl::StrCat(Who(*it->second), " is in flight for another save of that step"));
      }
      if (!google::protobuf::util::MessageDifferencer::Equals(it->second->manifest, manifest)) {
        const absl::Status unlike = absl::AbortedError(
            absl::StrCat("host ", host, " sent a manifest of step ", manifest.step(), " of job ",
                         manifest.job(), " unlike the one host ", it->second->starter, " sent"));
        FailLocked(*it->second, unlike);
        return unlike;
      }
      copy = it->second;
    } else {
      for (const std::shared_ptr<Copy>& ended : ended_) {
        if (!same_save(*ended)) continue;
        if (!ended->outcome.ok()) return ended->outcome;
        return absl::AlreadyExistsError(absl::StrCat(Who(*ended), " is committed"));
      }
      size_t started_here = 0;
      for (const auto& [k, c] : by_step_) started_here += c->starter == host ? 1 : 0;
      if (by_step_.size() >= kMaxInFlight || started_here >= kMaxStartedPerHost) {
        return absl::ResourceExhaustedError(
            absl::StrCat("durable copies of steps spread over hosts in flight: ", by_step_.size(),
                         ", ", started_here, " started by host ", host, "; the limits are ",
                         kMaxInFlight, " and ", kMaxStartedPerHost, " a host"));
      }
      copy = std::make_shared<Copy>();
      copy->id = absl::StrCat("persist-", ++next_id_);
      copy->starter = host;
      copy->manifest = std::move(manifest);
      copy->hosts = std::move(hosts);
      (void)planning::ForEachChunk(copy->manifest,
                                   [&](const v1::StoredChunk& chunk, const std::string&) {
                                     if (chunk.length() > 0) copy->files.insert(chunk.file());
                                     return absl::OkStatus();
                                   });
      copy->started = absl::Now();
      copy->deadline = copy->started + options_.deadline;
      by_step_[key] = copy;
      by_id_[copy->id] = copy;
      ++running_;
      copy->runner = std::thread([this, copy] { Run(copy); });
      // Threads of copies that ended are joined as new ones start.
      for (const std::shared_ptr<Copy>& ended : ended_) {
        if (ended->runner.joinable()) finished.push_back(std::move(ended->runner));
      }
    }
  }
  for (std::thread& t : finished) t.join();
  absl::MutexLock lock(&mu_);
  const bool named = coordinator::AwaitUnlessGone(
      mu_, [&] { return !copy->partial.empty() || copy->ended || !copy->failure.ok(); }, gone);
  if (!named) return absl::CancelledError("the caller went away");
  if (copy->ended && !copy->outcome.ok()) return copy->outcome;
  if (!copy->failure.ok()) return copy->failure;
  if (copy->ended) return absl::AlreadyExistsError(absl::StrCat(Who(*copy), " is committed"));
  absl::string_view relative = copy->partial;
  absl::ConsumePrefix(&relative, durable_.root());
  absl::ConsumePrefix(&relative, "/");
  v1::SpreadPersistDir dir;
  dir.set_persist_id(copy->id);
  dir.set_partial_dir(std::string(relative));
  return dir;
}

absl::StatusOr<v1::SpreadPersistResult> SpreadPersists::Report(
    const v1::SpreadPersistCopied& request, const coordinator::CallerGone& gone) {
  const std::string& host = request.host().host();
  std::shared_ptr<Copy> copy;
  absl::MutexLock lock(&mu_);
  if (auto it = by_id_.find(request.persist_id()); it != by_id_.end()) copy = it->second;
  for (const std::shared_ptr<Copy>& ended : ended_) {
    if (ended->id == request.persist_id()) copy = ended;
  }
  if (copy == nullptr) {
    return absl::NotFoundError(absl::StrCat("no durable copy ", request.persist_id().substr(0, 64),
                                            " is known here (the coordinator restarted?)"));
  }
  if (!copy->hosts.contains(host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("host ", host.substr(0, 256), " is not a host of ", Who(*copy)));
  }
  if (!request.error().empty()) {
    FailLocked(*copy, absl::AbortedError(absl::StrCat("host ", host, " could not copy its files: ",
                                                      request.error().substr(0, 1024))));
  } else if (!copy->ended && copy->failure.ok() && !copy->reported.contains(host)) {
    std::vector<std::string>& files = copy->reported[host];
    for (const std::string& file : request.files()) {
      if (!copy->files.contains(file) || FileHost(file) != host) {
        FailLocked(*copy, absl::InvalidArgumentError(
                              absl::StrCat("host ", host, " reported file ", file.substr(0, 256),
                                           ", which is not one of its data files of the step")));
        break;
      }
      files.push_back(file);
    }
  }
  const bool ended = coordinator::AwaitUnlessGone(
      mu_, [&] { return copy->ended; }, gone);
  if (!ended) return absl::CancelledError("the caller went away");
  if (!copy->outcome.ok()) {
    // A host may have been writing when the directory was removed first.
    // Unless the commit may have landed (coordinator/commit.h).
    if (!copy->partial.empty() && !coordinator::CommitOutcomeUnknown(copy->outcome)) {
      (void)durable_.backend().RemoveAll(copy->partial);
    }
    return copy->outcome;
  }
  v1::SpreadPersistResult result;
  result.set_path(copy->path);
  return result;
}

std::string SpreadPersists::LostHost(const std::vector<std::string>& hosts) const {
  if (!options_.host_live) return "";
  for (const std::string& host : hosts) {
    if (!options_.host_live(host)) return host;
  }
  return "";
}

absl::Status SpreadPersists::AwaitHosts(Copy& copy, const std::string& partial) {
  {
    absl::MutexLock lock(&mu_);
    copy.partial = partial;
  }
  while (true) {
    std::vector<std::string> unreported;
    {
      absl::MutexLock lock(&mu_);
      auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !copy.failure.ok() || copy.reported.size() == copy.hosts.size();
      };
      mu_.AwaitWithTimeout(absl::Condition(&done), kCheckEvery);
      if (stopping_) FailLocked(copy, absl::UnavailableError("the coordinator is shutting down"));
      if (!copy.failure.ok()) return copy.failure;
      if (copy.reported.size() == copy.hosts.size()) break;
      for (const std::string& host : copy.hosts) {
        if (!copy.reported.contains(host)) unreported.push_back(host);
      }
      if (absl::Now() > copy.deadline) {
        FailLocked(copy, absl::DeadlineExceededError(absl::StrCat(
                             "hosts ", absl::StrJoin(unreported, ", "),
                             " did not report their files within ",
                             absl::FormatDuration(options_.deadline), " of the first host")));
        return copy.failure;
      }
    }
    const std::string lost = LostHost(unreported);
    if (!lost.empty()) {
      absl::MutexLock lock(&mu_);
      FailLocked(copy,
                 absl::UnavailableError(absl::StrCat(
                     "host ", lost, " was lost (no heartbeat) before it reported its files")));
    }
  }
  // Every host reported: every data file of the step is there.
  absl::MutexLock lock(&mu_);
  std::set<std::string> reported;
  for (const auto& [host, files] : copy.reported) reported.insert(files.begin(), files.end());
  for (const std::string& file : copy.files) {
    if (!reported.contains(file)) {
      FailLocked(copy, absl::DataLossError(absl::StrCat("host ", FileHost(file),
                                                        " did not report its file ", file)));
      return copy.failure;
    }
  }
  // Tests kill the coordinator here: every file is on storage, uncommitted.
  FaultPoint("spread_persist.reported");
  return absl::OkStatus();
}

void SpreadPersists::Run(std::shared_ptr<Copy> copy) {
  absl::StatusOr<std::string> path = durable_.CommitCopy(
      copy->manifest, [&](const std::string& partial) { return AwaitHosts(*copy, partial); });
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    copy->ended = true;
    copy->outcome = path.ok() ? absl::OkStatus() : WithContext(path.status(), Who(*copy));
    if (path.ok()) copy->path = *path;
    ++(path.ok() ? counts_.committed : counts_.failed);
    by_step_.erase({copy->manifest.job(), copy->manifest.step()});
    // Kept a while for late hosts: what names the save, not its tensors.
    v1::CheckpointManifest kept;
    kept.set_job(copy->manifest.job());
    kept.set_step(copy->manifest.step());
    kept.set_created_unix_ms(copy->manifest.created_unix_ms());
    copy->manifest = std::move(kept);
    copy->files.clear();
    by_id_.erase(copy->id);
    ended_.push_back(copy);
    while (ended_.size() > kEndedKept && !ended_.front()->runner.joinable()) ended_.pop_front();
    --running_;
    line = absl::StrFormat(
        "ckptd: spread-persist job=%s step=%d hosts=%d duration_s=%.3f outcome=%s%s\n",
        copy->manifest.job(), copy->manifest.step(), copy->hosts.size(),
        absl::ToDoubleSeconds(absl::Now() - copy->started), path.ok() ? "ok" : "failed",
        path.ok() ? absl::StrCat(" path=", *path)
                  : absl::StrCat(" error=\"", copy->outcome.message(), "\""));
  }
  std::fputs(line.c_str(), stderr);
}

void SpreadPersists::Stop() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    mu_.Await(absl::Condition(
        +[](int* running) { return *running == 0; }, &running_));
    for (auto& copy : ended_) {
      if (copy->runner.joinable()) threads.push_back(std::move(copy->runner));
    }
  }
  for (std::thread& t : threads) t.join();
}

SpreadPersistCounts SpreadPersists::counts() const {
  absl::MutexLock lock(&mu_);
  SpreadPersistCounts counts = counts_;
  counts.in_flight = by_step_.size();
  return counts;
}

}  // namespace ckpt::tier
