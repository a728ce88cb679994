#include "daemon/storage/s3/s3_leases.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace ckpt::storage::s3 {
namespace {

constexpr char kLeases[] = ".leases/";
// A key with more leases than this is not one ckpt made (a holder has one
// or two): listing stops there rather than read without bound.
constexpr size_t kMostLeases = 10000;

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

S3Leases::S3Leases(S3Client& client, std::string bucket, LeaseOptions options)
    : client_(client), bucket_(std::move(bucket)), options_(options) {
  renewer_ = std::thread([this] { RenewLoop(); });
}

S3Leases::~S3Leases() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  renewer_.join();
}

std::string S3Leases::NewId() {
  absl::BitGen random;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(random),
                         absl::Uniform<uint64_t>(random));
}

absl::Status S3Leases::TryOnce(Held& held) {
  std::string mine;
  {
    absl::MutexLock lock(&held.mu);
    held.key = LeaseKey(held.prefix, held.exclusive, held.id, absl::Now() + options_.ttl);
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
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  const int64_t skew_ms = absl::ToInt64Milliseconds(options_.clock_skew);
  std::string conflict;
  for (const ListedObject& object : listing->objects) {
    const std::optional<LeaseName> other = ParseLeaseName(object.key.substr(held.prefix.size()));
    if (!other.has_value() || other->id == held.id) continue;
    if (other->expiry_ms < now_ms - skew_ms) {
      // Its holder stopped renewing (died): not a lock any more.
      (void)client_.DeleteObject(bucket_, object.key);
      continue;
    }
    if (held.exclusive || other->exclusive) conflict = object.key;
  }
  if (conflict.empty()) return absl::OkStatus();
  (void)client_.DeleteObject(bucket_, mine);
  return absl::UnavailableError(
      absl::StrCat("lock ", held.what, ": held by another process (lease ", conflict, ")"));
}

absl::StatusOr<std::unique_ptr<FileLock>> S3Leases::Acquire(const std::string& key, LockMode mode,
                                                            bool wait, const std::string& what) {
  auto held = std::make_shared<Held>();
  held->prefix = key + kLeases;
  held->what = what;
  held->exclusive = mode == LockMode::kExclusive;
  held->id = NewId();
  const absl::Time give_up = absl::Now() + options_.wait_limit;
  absl::Duration backoff = absl::Milliseconds(50);
  absl::BitGen jitter;
  while (true) {
    absl::Status s = TryOnce(*held);
    if (s.ok()) break;
    if (!absl::IsUnavailable(s) || !wait) return s;
    if (absl::Now() >= give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          s.message(), "; waited ", absl::FormatDuration(options_.wait_limit), " for it"));
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
      absl::MutexLock lock(&h->mu);
      if (h->released) continue;
      const std::string renewed =
          LeaseKey(h->prefix, h->exclusive, h->id, absl::Now() + options_.ttl);
      if (absl::Status s = client_.PutObject(bucket_, renewed, ""); !s.ok()) {
        std::fprintf(stderr, "ckptd: renewing the lease of %s: %s\n", h->what.c_str(),
                     std::string(s.message()).c_str());
        continue;
      }
      (void)client_.DeleteObject(bucket_, h->key);
      h->key = renewed;
    }
  }
}

}  // namespace ckpt::storage::s3
