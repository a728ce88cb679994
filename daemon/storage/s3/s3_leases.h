// Locks across processes and hosts on a store without locks: leases as
// objects. A holder of a lock on key K writes K.leases/<m>.<id>.<expiry>
// (m: s shared, x exclusive; id: random, the holder's; expiry: Unix ms),
// then lists K.leases/: another holder's unexpired lease in a conflicting
// mode means the lock is taken, and the holder deletes its own lease and
// waits or gives up. Two contenders that write before they list each see
// the other at least (S3 lists are read-after-write consistent), so no two
// conflicting holders ever both proceed; at worst both back off.
//
// A holder renews its lease (a new object, then the old one deleted) well
// before it expires; one that died stops renewing, and its lease is ignored
// (and deleted by whoever sees it) once past its expiry by more than the
// clock skew allowed between hosts; one whose expiry lies further ahead
// than any holder writes is not ckpt's and is ignored. Lease requests have
// a client of their own with a short deadline. gc pins steps this way (PinStep), so a
// load on another host or `ckptctl export` keeps a step from deletion.
#ifndef CKPT_DAEMON_STORAGE_S3_S3_LEASES_H_
#define CKPT_DAEMON_STORAGE_S3_S3_LEASES_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/storage/backend.h"
#include "daemon/storage/s3/s3_client.h"

namespace ckpt::storage::s3 {

struct LeaseOptions {
  absl::Duration ttl = absl::Seconds(120);
  absl::Duration renew_every = absl::Seconds(20);
  // One lease request and its retries: far under ttl - renew_every, so a
  // slow store costs a renewal, not the lease.
  absl::Duration call_deadline = absl::Seconds(10);
  // Another host's clock may be this far behind ours: its lease counts
  // until expiry + skew.
  absl::Duration clock_skew = absl::Seconds(30);
  // A waiting lock gives up (DEADLINE_EXCEEDED) after this long.
  absl::Duration wait_limit = absl::Minutes(5);
};

// The parts of a lease object's name (after "<key>.leases/").
struct LeaseName {
  bool exclusive = false;
  std::string id;
  int64_t expiry_ms = 0;
};
// nullopt for a name ckpt did not write.
std::optional<LeaseName> ParseLeaseName(absl::string_view name);

class S3Leases {
 public:
  S3Leases(const S3ClientOptions& client, std::string bucket, LeaseOptions options = {});
  ~S3Leases();  // after every lock it gave

  // A lease on key in mode; `what` names the lock in errors. UNAVAILABLE
  // when !wait and another holder's lease conflicts; waiting, polls with
  // backoff until free or wait_limit.
  absl::StatusOr<std::unique_ptr<FileLock>> Acquire(const std::string& key, LockMode mode,
                                                    bool wait, const std::string& what);
  // The lease requests' counts (the backend's metrics add them).
  const S3Stats& stats() const { return client_.stats(); }

 private:
  struct Held;
  class Lock;
  // Writes a lease and lists the others: true when none conflicts (the
  // lease stays), false when one does (the lease is gone again; *conflict
  // names it). An error is the store's.
  absl::StatusOr<bool> TryOnce(Held& held, std::string* conflict);
  // Replaces the lease with one expiring a ttl from now.
  absl::Status Renew(Held& held);
  void Release(const std::shared_ptr<Held>& held);
  void RenewLoop();

  S3Client client_;
  const std::string bucket_;
  const LeaseOptions options_;
  absl::Mutex mu_;
  std::set<std::shared_ptr<Held>> held_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread renewer_;
};

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_S3_LEASES_H_
