// Which ranks a save's or load's barrier waits for in vain: ranks of the
// job with no session on this host (never attached, or reaped after their
// process died) and not yet in the barrier. A rank absent for the whole of
// the grace (--rank_grace_s) fails the barrier at once, naming it, instead
// of every other rank waiting out --plan_timeout_s for a rank that cannot
// come. A rank that attaches within the grace starts it again should it go.
//
// A job on this host alone expects ranks 0..world_size-1 here. A job spread
// over hosts says only how many of its ranks are here (local_world_size),
// not which: the barrier fails when fewer of them have a session than that
// for the grace.
//
// The barrier's session calls Check from its periodic deadline check; the
// decisions need no clock or daemon of their own, so tests call them with
// any times.
//
// Thread-safety: none; the owning session serialises calls under its lock.
#ifndef CKPT_DAEMON_SESSION_ABSENT_RANKS_H_
#define CKPT_DAEMON_SESSION_ABSENT_RANKS_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ckpt::session {

class AbsentRanks {
 public:
  // Ranks watched at once, the lowest absent ones: a world of 65536 with one
  // rank here costs this many entries a check, not the world. A rank beyond
  // them starts its grace when it is watched, so it is never failed early.
  static constexpr size_t kWatched = 64;

  AbsentRanks(std::string job, int world_size, int local_world_size);

  // One look at the barrier at `now`. `attached`: the job's ranks with a
  // session here, sorted (RankSessions::RanksOf); `arrived(r)`: rank r is in
  // the barrier already (its going away is RankGone's to report). ABORTED
  // naming the rank (or, spread over hosts, the count) once one has been
  // absent for `grace`; OK otherwise.
  absl::Status Check(absl::Time now, absl::Duration grace, const std::vector<int>& attached,
                     const std::function<bool(int)>& arrived);

 private:
  const std::string job_;
  const int world_size_;
  const int local_world_size_;
  // Whole job here: the watched absent ranks, and since when each has been.
  std::map<int, absl::Time> since_;
  // Spread over hosts: since when fewer than local_world_size had a session.
  std::optional<absl::Time> short_since_;
};

}  // namespace ckpt::session

#endif  // CKPT_DAEMON_SESSION_ABSENT_RANKS_H_
