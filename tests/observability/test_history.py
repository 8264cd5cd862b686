"""status.history: a bounded, decimated curve per series, whatever the run's length; its size at
100 and 10,000 rollouts (quoted in docs/observability.md)."""

from __future__ import annotations

import json
import random

import pytest
from lorarl.reporter.history import Curve
from lorarl.reporter.logparse import Event
from lorarl.reporter.summary import Summary

from tests.reporter.reporter_testlib import decimated


@pytest.mark.parametrize("rollouts", [1, 2, 99, 100, 101, 257, 1000, 10_000])
def test_a_curve_keeps_at_most_101_evenly_spaced_points_and_the_newest(rollouts):
    rng = random.Random(rollouts)
    values = {r: round(rng.random(), 4) for r in range(rollouts)}
    curve = Curve()
    for r, v in values.items():
        curve.add(r, v)
    points = curve.points()
    assert points == decimated(values)  # the oracle: the coarsest power-of-two grid holding <= 100
    assert len(points) <= 101 and points[0] == [0, values[0]] and points[-1] == [rollouts - 1, values[rollouts - 1]]
    if rollouts > 100:
        assert len(points) > 50  # never thinner than half the limit
    gaps = {b[0] - a[0] for a, b in zip(points[:-2], points[1:-1], strict=True)}
    assert len(gaps) <= 1  # evenly spaced (the newest point aside)


def run(rollouts: int, evals=("gsm8k", "math"), interval=20) -> dict:
    """The reporter's status after a run of ``rollouts`` (evals every interval; a logprob diff every
    10th rollout only: the reporter's diff mean is a sum over every step at each event, which
    makes 10,000 steps slow to feed, not bigger)."""
    rng = random.Random(7)
    s = Summary(rollouts, clock=lambda: 0.0)
    for r in range(rollouts):
        s.apply(Event("rollout", r, {"rollout/raw_reward": rng.random()}))
        s.apply(Event("step", r, {"train/train_rollout_logprob_abs_diff": rng.random() / 50} if r % 10 == 0 else {}))
        if r == 0 or (r + 1) % interval == 0:
            s.apply(Event("eval", r if r else 0, {f"eval/{n}": rng.random() for n in evals}))
    return s.status()


@pytest.mark.parametrize("rollouts, at_most", [(100, 8_000), (10_000, 8_000)])
def test_the_history_stays_small_at_any_length(rollouts, at_most):
    status = run(rollouts)
    history = status["history"]
    size = len(json.dumps(history, separators=(",", ":")))
    whole = len(json.dumps(status, separators=(",", ":")))
    print(f"{rollouts} rollouts: history {size} bytes ({len(history['reward'])} reward points), whole reporter status {whole} bytes")
    assert size <= at_most
    assert history["reward"][-1][0] == rollouts - 1 and history["reward"][0][0] == 0
    assert {e["name"] for e in history["eval"]} == {"gsm8k", "math"}
    assert all(len(e["points"]) <= 101 for e in history["eval"])
