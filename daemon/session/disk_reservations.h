// The per-job disk quota (--job_max_disk_bytes) as reservations: a save
// that will write to storage (durable, or memory+durable, whose background
// persist writes the same bytes) reserves them when it is planned and holds
// them until its bytes are committed and counted by the catalog, or until it
// fails. A job's use is then what the catalog counts plus what its saves in
// flight reserved, so no interleaving of saves planned at once can take a
// job past its quota: each admission sees every reservation made before it.
//
// The decision is a pure function (DecideDiskReservation); the ledger only
// keeps the reservations and orders admissions. One ledger serves every
// save of the daemon.
//
// Thread-safety: all methods are safe from any thread. A Reservation may
// outlive the ledger that made it (the memory tier's queued persists hold
// theirs past the daemon's sessions): the ledger's state is shared with it.
#ifndef CKPT_DAEMON_SESSION_DISK_RESERVATIONS_H_
#define CKPT_DAEMON_SESSION_DISK_RESERVATIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ckpt::session {

// OK when `asked` more bytes fit `quota` beside `committed` (the job's
// checkpoints on disk) and `reserved` (its saves in flight); 0 is no limit.
// Otherwise RESOURCE_EXHAUSTED naming the job, the three figures, the quota
// and its flag. Sums that overflow do not fit.
absl::Status DecideDiskReservation(const std::string& job, uint64_t committed, uint64_t reserved,
                                   uint64_t asked, uint64_t quota);

class DiskReservations {
 public:
  struct State;  // shared with the reservations

  // Bytes reserved for one save; released when destroyed (the save
  // committed and the catalog counts them, or it failed, or its session was
  // dropped).
  class Reservation {
   public:
    Reservation(std::shared_ptr<State> state, std::string job, uint64_t bytes);
    ~Reservation();
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    uint64_t bytes() const { return bytes_; }

   private:
    const std::shared_ptr<State> state_;
    const std::string job_;
    const uint64_t bytes_;
  };

  // The job's bytes on disk, as the catalog counts them.
  using CommittedBytes = std::function<absl::StatusOr<uint64_t>()>;

  DiskReservations();
  ~DiskReservations();
  DiskReservations(const DiskReservations&) = delete;
  DiskReservations& operator=(const DiskReservations&) = delete;

  // Reserves `bytes` for a save of `job` under `quota` (0: no limit, the
  // reservation is kept all the same). `committed` is read without any lock
  // held (it lists the job's checkpoints); a reservation released while it
  // reads may or may not be in what it returns, so those bytes are counted
  // as still held, and the read is tried again if only they stand in the
  // way. The refusal is DecideDiskReservation's; an error of `committed`
  // comes back with context.
  absl::StatusOr<std::unique_ptr<Reservation>> Reserve(const std::string& job, uint64_t bytes,
                                                       uint64_t quota,
                                                       const CommittedBytes& committed);

  // Bytes reserved now by the job's saves in flight.
  uint64_t reserved(const std::string& job) const;

 private:
  const std::shared_ptr<State> state_;
};

}  // namespace ckpt::session

#endif  // CKPT_DAEMON_SESSION_DISK_RESERVATIONS_H_
