#include "daemon/storage/s3/s3_leases.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/lib/secure_random.h"

namespace ckpt::storage::s3 {
namespace {

constexpr char kLeases[] = ".leases/";
// A key with more leases than this is not one ckpt made (a holder has one
// or two): listing stops there rather than read without bound.
constexpr size_t kMostLeases = 10000;
// Dead holders' leases deleted per try: the rest wait for the next one.
constexpr int kMostLapsedDeletes = 8;

S3ClientOptions LeaseClient(S3ClientOptions options, absl::Duration deadline) {
  options.retry.deadline = std::min(options.retry.deadline, deadline);
  options.attempt_timeout = std::min(options.attempt_timeout, deadline);
  return options;
}

std::string LeaseKey(const std::string& prefix, bool exclusive, const std::string& id,
                     absl::Time expiry) {
  return absl::StrCat(prefix, exclusive ? "x" : "s", ".", id, ".", absl::ToUnixMillis(expiry));
}

}  // namespace

std::optional<LeaseName> ParseLeaseName(absl::string_view name) {
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  if (parts.size() != 3 || (parts[0] != "s" && parts[0] != "x")) return std::nullopt;
  if (parts[1].empty() || parts[1].size() > 64 ||
      !std::all_of(parts[1].begin(), parts[1].end(),
                   [](char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  LeaseName out;
  if (!absl::SimpleAtoi(parts[2], &out.expiry_ms) || out.expiry_ms < 0) return std::nullopt;
  out.exclusive = parts[0] == "x";
  out.id = std::string(parts[1]);
  return out;
}

struct S3Leases::Held {
  std::string prefix;  // "<key>.leases/"
  std::string what;
  bool exclusive = false;
  std::string id;
  absl::Mutex mu;
  std::string key ABSL_GUARDED_BY(mu);  // the lease object now
  absl::Time expiry ABSL_GUARDED_BY(mu);
  bool released ABSL_GUARDED_BY(mu) = false;
};

class S3Leases::Lock : public FileLock {
 public:
  Lock(S3Leases& leases, std::shared_ptr<Held> held) : leases_(leases), held_(std::move(held)) {}
  ~Lock() override { leases_.Release(held_); }

 private:
  S3Leases& leases_;
  const std::shared_ptr<Held> held_;
};

S3Leases::S3Leases(const S3ClientOptions& client, std::string bucket, LeaseOptions options)
    : client_(LeaseClient(client, options.call_deadline)),
      bucket_(std::move(bucket)),
      options_(options) {
  renewer_ = std::thread([this] { RenewLoop(); });
}

S3Leases::~S3Leases() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  renewer_.join();
}

absl::StatusOr<bool> S3Leases::TryOnce(Held& held, std::string* conflict) {
  std::string mine;
  const absl::Time written = absl::Now();
  {
    absl::MutexLock lock(&held.mu);
    held.expiry = written + options_.ttl;
    held.key = LeaseKey(held.prefix, held.exclusive, held.id, held.expiry);
    mine = held.key;
  }
  if (absl::Status s = client_.PutObject(bucket_, mine, ""); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("lock ", held.what, ": ", s.message()));
  }
  absl::StatusOr<Listing> listing = client_.List(bucket_, held.prefix, "", kMostLeases);
  if (!listing.ok()) {
    (void)client_.DeleteObject(bucket_, mine);
    return absl::Status(listing.status().code(),
                        absl::StrCat("lock ", held.what, ": ", listing.status().message()));
  }
  const absl::Time now = absl::Now();
  const int64_t lapsed_ms = absl::ToUnixMillis(now - options_.clock_skew);
  // No holder writes an expiry further ahead than this (its clock ahead of
  // ours by the skew at most).
  const int64_t bogus_ms = absl::ToUnixMillis(now + options_.ttl + 2 * options_.clock_skew);
  int deletes = 0;
  conflict->clear();
  for (const ListedObject& object : listing->objects) {
    if (!absl::StartsWith(object.key, held.prefix)) continue;  // not what was asked
    const std::optional<LeaseName> other = ParseLeaseName(object.key.substr(held.prefix.size()));
    if (!other.has_value() || other->id == held.id || other->expiry_ms > bogus_ms) continue;
    if (other->expiry_ms < lapsed_ms) {
      // Its holder stopped renewing (died): not a lock any more.
      if (deletes++ < kMostLapsedDeletes) (void)client_.DeleteObject(bucket_, object.key);
      continue;
    }
    if (held.exclusive || other->exclusive) *conflict = object.key;
  }
  if (conflict->empty()) {
    // Slow answers ate into the lease: a fresh one before it counts.
    if (absl::Now() - written > options_.ttl / 4) {
      if (absl::Status s = Renew(held); !s.ok()) {
        (void)client_.DeleteObject(bucket_, mine);
        return s;
      }
    }
    return true;
  }
  (void)client_.DeleteObject(bucket_, mine);
  return false;
}

absl::Status S3Leases::Renew(Held& held) {
  absl::MutexLock lock(&held.mu);
  if (held.released) return absl::OkStatus();
  const absl::Time expiry = absl::Now() + options_.ttl;
  const std::string renewed = LeaseKey(held.prefix, held.exclusive, held.id, expiry);
  if (absl::Status s = client_.PutObject(bucket_, renewed, ""); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("renewing the lease of ", held.what, ": ", s.message()));
  }
  (void)client_.DeleteObject(bucket_, held.key);
  held.key = renewed;
  held.expiry = expiry;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FileLock>> S3Leases::Acquire(const std::string& key, LockMode mode,
                                                            bool wait, const std::string& what) {
  auto held = std::make_shared<Held>();
  held->prefix = key + kLeases;
  held->what = what;
  held->exclusive = mode == LockMode::kExclusive;
  held->id = RandomHex(16);
  const absl::Time give_up = absl::Now() + options_.wait_limit;
  absl::Duration backoff = absl::Milliseconds(50);
  absl::BitGen jitter;
  std::string conflict;
  while (true) {
    absl::StatusOr<bool> held_now = TryOnce(*held, &conflict);
    if (!held_now.ok()) return held_now.status();
    if (*held_now) break;
    const std::string taken =
        absl::StrCat("lock ", what, ": held by another process (lease ", conflict, ")");
    if (!wait) return absl::UnavailableError(taken);
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat(taken, "; waited ", absl::FormatDuration(options_.wait_limit), " for it"));
    }
    // No store notifies a waiter: poll, with backoff and jitter so that
    // two waiters do not keep meeting.
    absl::SleepFor(
        absl::Milliseconds(absl::Uniform<double>(jitter, 0, absl::ToDoubleMilliseconds(backoff))));
    backoff = std::min(2 * backoff, absl::Seconds(1));
  }
  absl::MutexLock lock(&mu_);
  held_.insert(held);
  return std::make_unique<Lock>(*this, held);
}

void S3Leases::Release(const std::shared_ptr<Held>& held) {
  {
    absl::MutexLock lock(&mu_);
    held_.erase(held);
  }
  absl::MutexLock lock(&held->mu);
  held->released = true;
  // Not deleted (the store unreachable): it expires.
  (void)client_.DeleteObject(bucket_, held->key);
}

void S3Leases::RenewLoop() {
  while (true) {
    std::vector<std::shared_ptr<Held>> held;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.renew_every);
      if (stopping_) return;
      held.assign(held_.begin(), held_.end());
    }
    for (const std::shared_ptr<Held>& h : held) {
      if (absl::Status s = Renew(*h); !s.ok()) {
        bool lapsed = false;
        {
          absl::MutexLock lock(&h->mu);
          lapsed = absl::Now() > h->expiry;
        }
        // Other hosts may now take the lock: say so, loudly.
        std::fprintf(stderr, "ckptd: %s%s\n", std::string(s.message()).c_str(),
                     lapsed ? " (the lease has lapsed: gc elsewhere may not see this pin)" : "");
      }
    }
  }
}

}  // namespace ckpt::storage::s3
