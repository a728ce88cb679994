"""How often to checkpoint: the interval that pays, from what a checkpoint
costs the trainer and how often the job fails.

Checkpointing every tau seconds costs delta (the trainer's stall) each time;
a failure, once every M seconds on average (the job's MTBF, all its hosts
together), loses on average half an interval of work plus the restart.
Young (1974) and Daly (2006) give the interval that minimizes the waste:

    tau = sqrt(2 * delta * M) - delta      (delta < M / 2; else M)

and the fraction of the job's time wasted at interval tau, with R the
restart:

    waste = delta / tau + (tau / 2 + delta + R) / M

ckpt's lazy saves make delta small, so tau can be short; but a save cannot
be started faster than the last one is taken by the daemon (its snapshot
and, for storage, its write), so the interval never goes below
`min_interval_s`.

    policy = ckpt.IntervalPolicy(mtbf_s=4 * 3600)
    for step in ...:
        train_step()
        policy.maybe_save(cp, step, state)   # measures each save's stall
"""
import math
import time
from typing import Callable, Optional


def young_daly_interval(cost_s: float, mtbf_s: float) -> float:
    """Seconds between checkpoints that minimize the expected waste (Daly's
    first-order rule) for a checkpoint stalling the trainer cost_s seconds
    and a mean time between failures of mtbf_s seconds."""
    if not cost_s >= 0 or not mtbf_s > 0 or math.isinf(cost_s) or math.isinf(mtbf_s):
        raise ValueError(f"cost_s ({cost_s!r}) must be >= 0 and mtbf_s ({mtbf_s!r}) > 0, finite")
    if cost_s >= mtbf_s / 2:
        return mtbf_s
    return math.sqrt(2.0 * cost_s * mtbf_s) - cost_s if cost_s > 0 else 0.0


def expected_waste(interval_s: float, cost_s: float, mtbf_s: float,
                   restart_s: float = 0.0) -> float:
    """The fraction of the job's time lost to checkpoints and failures at
    this interval: the stalls (cost_s per interval_s of work) and, per
    failure (one per mtbf_s), half an interval of lost work, the stall of
    the checkpoint in flight and the restart."""
    if not interval_s > 0 or not cost_s >= 0 or not mtbf_s > 0 or not restart_s >= 0:
        raise ValueError(
            f"interval_s ({interval_s!r}) and mtbf_s ({mtbf_s!r}) must be > 0, cost_s "
            f"({cost_s!r}) and restart_s ({restart_s!r}) >= 0")
    return cost_s / interval_s + (interval_s / 2.0 + cost_s + restart_s) / mtbf_s


class IntervalPolicy:
    """Saves when the Young/Daly interval has passed since the last save.

    The checkpoint's cost is measured: each save's stall (the save() call
    plus the wait for its snapshot, SaveHandle.stall_s), smoothed over the
    last saves (an exponential average, weight `smoothing` for the newest);
    `cost_s` seeds it before the first save is measured. The interval never
    goes below min_interval_s (a save must not outrun the daemon taking the
    last one). `clock` is for tests."""

    def __init__(self, mtbf_s: float, *, cost_s: float = 0.0, min_interval_s: float = 0.0,
                 restart_s: float = 0.0, smoothing: float = 0.3,
                 clock: Callable[[], float] = time.monotonic):
        young_daly_interval(cost_s, mtbf_s)  # validates both
        if not min_interval_s >= 0 or not restart_s >= 0 or not 0 < smoothing <= 1:
            raise ValueError(
                f"min_interval_s ({min_interval_s!r}) and restart_s ({restart_s!r}) must be "
                f">= 0, smoothing ({smoothing!r}) in (0, 1]")
        self.mtbf_s = float(mtbf_s)
        self.min_interval_s = float(min_interval_s)
        self.restart_s = float(restart_s)
        self.cost_s = float(cost_s)
        self._smoothing = smoothing
        self._clock = clock
        self._last_save: Optional[float] = None
        self._pending = None  # the last save's handle, until its stall is known
        self._measured = 0

    @property
    def interval_s(self) -> float:
        return max(young_daly_interval(self.cost_s, self.mtbf_s), self.min_interval_s)

    @property
    def waste(self) -> float:
        """The expected fraction of time lost at the current interval."""
        return expected_waste(max(self.interval_s, 1e-9), self.cost_s, self.mtbf_s,
                              self.restart_s)

    def observe(self, stall_s: float) -> None:
        """One save's measured stall, in seconds."""
        if not stall_s >= 0 or math.isinf(stall_s):
            raise ValueError(f"stall_s must be >= 0 and finite, not {stall_s!r}")
        if self._measured == 0:
            self.cost_s = float(stall_s)
        else:
            self.cost_s += self._smoothing * (float(stall_s) - self.cost_s)
        self._measured += 1

    def due(self) -> bool:
        """True at the first call, then once interval_s has passed since the
        last save."""
        self._collect()
        return self._last_save is None or self._clock() - self._last_save >= self.interval_s

    def maybe_save(self, checkpointer, step: int, state, **save_kwargs):
        """checkpointer.save(step, state, **save_kwargs) when due; its
        SaveHandle, or None when not due."""
        if not self.due():
            return None
        handle = checkpointer.save(step, state, **save_kwargs)
        self._last_save = self._clock()
        self._pending = handle
        return handle

    def _collect(self) -> None:
        """The last save's stall, once its snapshot was waited for."""
        if self._pending is not None and self._pending.stall_s is not None:
            self.observe(self._pending.stall_s)
            self._pending = None
