"""The checkpoint interval policy: Young/Daly's interval and the waste it
minimizes, and a policy that saves when the interval has passed, measuring
each save's stall through a real ckptd."""
import math

import pytest
import torch

import ckpt


def test_young_daly_interval_matches_the_formula():
    # 10 s per checkpoint, a failure an hour: sqrt(2 * 10 * 3600) - 10.
    assert ckpt.young_daly_interval(10, 3600) == pytest.approx(math.sqrt(72000) - 10)
    # Free checkpoints: every moment; as costly as half the MTBF: once per MTBF.
    assert ckpt.young_daly_interval(0, 3600) == 0
    assert ckpt.young_daly_interval(1800, 3600) == 3600
    for bad in [(-1, 3600), (1, 0), (float("nan"), 1), (1, float("inf"))]:
        with pytest.raises(ValueError):
            ckpt.young_daly_interval(*bad)


def test_the_interval_minimizes_the_expected_waste():
    cost, mtbf = 2.0, 4 * 3600.0
    best = ckpt.young_daly_interval(cost, mtbf)
    at_best = ckpt.expected_waste(best, cost, mtbf)
    for factor in (0.25, 0.5, 0.8, 1.25, 2, 4):
        assert ckpt.expected_waste(best * factor, cost, mtbf) > at_best
    # delta / tau + (tau / 2 + delta + R) / M, by hand.
    assert ckpt.expected_waste(100, 2, 1000, restart_s=30) == pytest.approx(
        2 / 100 + (50 + 2 + 30) / 1000)
    with pytest.raises(ValueError):
        ckpt.expected_waste(0, 1, 100)


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeHandle:
    def __init__(self, stall):
        self.stall_s = stall


class FakeCheckpointer:
    def __init__(self, stall):
        self.saved = []
        self.stall = stall

    def save(self, step, state, **kwargs):
        self.saved.append((step, kwargs))
        return FakeHandle(self.stall)


def test_the_policy_saves_when_the_interval_has_passed_and_learns_the_cost():
    clock = FakeClock()
    policy = ckpt.IntervalPolicy(mtbf_s=3600, cost_s=8, clock=clock)
    assert policy.interval_s == pytest.approx(math.sqrt(2 * 8 * 3600) - 8)  # 232 s
    cp = FakeCheckpointer(stall=2.0)
    assert policy.maybe_save(cp, 1, {}, tier="memory") is not None  # the first call saves
    assert cp.saved == [(1, {"tier": "memory"})]
    clock.now += 100
    assert policy.maybe_save(cp, 2, {}) is None  # not due
    # The first measured stall replaces the seed: 2 s, so an interval of 118 s.
    assert policy.cost_s == 2.0
    assert policy.interval_s == pytest.approx(math.sqrt(2 * 2 * 3600) - 2)
    clock.now += 20  # 120 s since the save
    assert policy.maybe_save(cp, 3, {}) is not None
    cp.stall = 4.0
    clock.now += 200
    assert policy.maybe_save(cp, 4, {}) is not None
    clock.now += 1
    policy.due()
    # Smoothed: 2 + 0.3 * (2 - 2), then + 0.3 * (4 - 2).
    assert policy.cost_s == pytest.approx(2.6)
    assert [s for s, _ in cp.saved] == [1, 3, 4]


def test_the_interval_never_goes_below_the_floor():
    policy = ckpt.IntervalPolicy(mtbf_s=3600, cost_s=0.0, min_interval_s=30)
    assert policy.interval_s == 30
    assert 0 < policy.waste < 1
    for bad in [dict(mtbf_s=0), dict(mtbf_s=10, min_interval_s=-1),
                dict(mtbf_s=10, smoothing=0)]:
        with pytest.raises(ValueError):
            ckpt.IntervalPolicy(**bad)
    with pytest.raises(ValueError):
        policy.observe(-1)


def test_a_real_save_reports_its_stall(daemon):
    state = {"w": torch.randn(256, 256)}
    with ckpt.Checkpointer("policy", socket_path=daemon.socket) as cp:
        handle = cp.save(1, state)
        # Unknown until the snapshot was waited for; then the call plus the wait.
        stall_before = handle.stall_s
        handle.wait_snapshot()
        assert handle.stall_s is not None and handle.stall_s > 0
        if stall_before is not None:
            assert handle.stall_s >= stall_before
        blocking = cp.save(2, state, blocking=True)
        assert blocking.stall_s is not None and blocking.stall_s > 0  # the call took the snapshot
        clock = FakeClock()
        policy = ckpt.IntervalPolicy(mtbf_s=3600, clock=clock)
        assert policy.maybe_save(cp, 3, state) is not None
        cp.wait_snapshot()
        clock.now += 1
        assert policy.maybe_save(cp, 4, state) is None  # due only after the learned interval
        assert policy.cost_s > 0
        assert policy.interval_s == pytest.approx(
            math.sqrt(2 * policy.cost_s * 3600) - policy.cost_s)
        blocking.wait_persisted()
    with ckpt.Checkpointer("policy", socket_path=daemon.socket) as cp:
        back = {"w": torch.zeros(256, 256)}
        assert cp.load("latest", back) == 3
        assert torch.equal(back["w"], state["w"])
