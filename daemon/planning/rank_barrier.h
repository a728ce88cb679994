// The barrier every gathering of ranks is: a node's save and load wait for
// this host's ranks, the coordinator for every host's ranks of a job. It
// keeps who has arrived, says who is missing, and whether the deadline has
// passed; the owner holds the lock, waits on it and reads the clock, so the
// barrier's decisions are pure and tests call them with any times.
//
// It costs one entry per rank that arrived: a world of 65536 with one rank
// present costs one entry, not the world.
//
// Thread-safety: none; the owner serialises calls under its own lock.
#ifndef CKPT_DAEMON_PLANNING_RANK_BARRIER_H_
#define CKPT_DAEMON_PLANNING_RANK_BARRIER_H_

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ckpt::planning {

class RankBarrier {
 public:
  // Waits for `expected` distinct ranks of 0..world_size-1, until
  // `deadline`. expected below world_size: a job spread over hosts, where
  // which of its ranks come here is not known ahead.
  RankBarrier(int world_size, int expected, absl::Time deadline);

  // Records `rank`'s arrival; true when it was the last one expected.
  // INVALID_ARGUMENT for a rank outside the world, ALREADY_EXISTS for one
  // that arrived before, FAILED_PRECONDITION once complete: the caller
  // names the session in front.
  absl::StatusOr<bool> Arrive(int rank);
  bool Arrived(int rank) const { return arrived_.count(rank) > 0; }
  int arrived() const { return static_cast<int>(arrived_.size()); }
  int expected() const { return expected_; }
  int world_size() const { return world_size_; }
  bool complete() const { return arrived() == expected_; }
  absl::Time deadline() const { return deadline_; }
  // Still gathering at `now`, past the deadline.
  bool Expired(absl::Time now) const { return !complete() && now >= deadline_; }

  // The lowest ranks that have not arrived, at most `limit`, among
  // `candidates` (sorted) when given (the ranks known to belong here: a
  // job spread over hosts), else among the whole world.
  std::vector<int> MissingRanks(size_t limit, const std::vector<int>* candidates = nullptr) const;
  // "[0, 3, ...]": MissingRanks(limit, candidates), with "..." when more
  // than those are missing.
  std::string Missing(size_t limit = 16, const std::vector<int>* candidates = nullptr) const;

 private:
  const int world_size_;
  const int expected_;
  const absl::Time deadline_;
  std::set<int> arrived_;
};

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_RANK_BARRIER_H_
