"""The repair schedule (pure): every child of a job applied again once per period, spread by key."""

from __future__ import annotations

from lorarl.control.repair import Repairs, spread


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_job_is_repaired_once_per_period_from_a_moment_spread_by_its_key():
    """The first repair one to two periods after a job is first seen."""
    clock = Clock()
    repairs = Repairs(600, clock)
    keys = [("ns", f"job-{i}") for i in range(200)]
    first = {}
    for step in range(0, 1201, 30):  # resyncs every 30 s
        clock.now = 1000.0 + step
        for key in keys:
            if key not in first and repairs.due(key):
                first[key] = step
                repairs.done(key)
    assert set(first) == set(keys)  # every job within two periods of being first seen
    assert min(first.values()) >= 600  # none in the first period
    assert len(set(first.values())) > 10  # not all at one resync (a restart does not apply everything at once)
    assert max(first.values()) - min(first.values()) >= 500
    key = keys[0]
    clock.now = 1000.0 + first[key] + 599
    assert not repairs.due(key)
    clock.now += 1
    assert repairs.due(key)


def test_period_zero_never_repairs_and_forget_starts_over():
    clock = Clock()
    assert not Repairs(0, clock).due(("ns", "a"))
    repairs = Repairs(60, clock)
    repairs.done(("ns", "a"))
    repairs.forget(("ns", "a"))
    assert len(repairs) == 0
    assert 0 <= spread(("ns", "a")) < 1 and spread(("ns", "a")) == spread(("ns", "a"))
