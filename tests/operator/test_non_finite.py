"""A reward or loss that goes NaN/inf says so: the trainer's lines -> the reporter's bounded
status.metrics.nonFinite -> TrainingHealthy=False (NonFiniteMetric), an Event, the health gate.

The lines are miles' own format (reporter/logparse.py's doc), read by the real parser and folded
by the real reporter; the status it produces is checked against the typed model (the CRD's
source) before the operator's pure mapping judges it."""

from __future__ import annotations

import json

from lorarl.api import types as api
from lorarl.api.types import HealthSpec
from lorarl.control import health, status
from lorarl.control.queueing import HEALTH_SUSPENDED, suspend_reason
from lorarl.reporter.logparse import parse_line
from lorarl.reporter.summary import Summary

from tests.helpers import MILES_HEADER, job_from, miles_lines, with_spec
from tests.operator.status_table import facts, rayjob


def reported(log: list[str]) -> dict:
    summary = Summary(100, clock=lambda: 1.0e9)
    for line in log:
        event = parse_line(line)
        if event is not None:
            summary.apply(event)
    st = json.loads(json.dumps(summary.status(), allow_nan=False))  # what goes on the wire
    api.TrainingMetrics.model_validate(st["metrics"])  # within the CRD's bounds
    return st


def test_two_rollouts_of_nan_loss_are_not_yet_unhealthy_three_are():
    two = reported(miles_lines(0, 9, "0.1") + miles_lines(10, 11, "nan"))
    assert two["metrics"]["nonFinite"] == [{"metric": "loss", "value": "NaN", "since": 10, "rollout": 11, "streak": 2}]
    assert health.evaluate(HealthSpec(), two).status == "True"
    three = reported(miles_lines(0, 9, "0.1") + miles_lines(10, 12, "nan"))
    verdict = health.evaluate(HealthSpec(), three)
    assert (verdict.status, verdict.reason) == ("False", health.NON_FINITE_METRIC)
    assert verdict.message.startswith("train/loss has been NaN in every rollout since rollout 10 (3 or more in a row")
    # the message stays while the run stays diverged: no rewrite of the condition per rollout
    assert health.evaluate(HealthSpec(), reported(miles_lines(0, 9, "0.1") + miles_lines(10, 30, "nan"))) == verdict
    # and recovers: a finite loss clears it
    assert health.evaluate(HealthSpec(), reported(miles_lines(0, 9, "0.1") + miles_lines(10, 12, "nan") + miles_lines(13, 13, "0.2"))).status == "True"


def test_a_nan_gap_before_any_finite_one_is_judged_not_awaiting_metrics():
    log = [f"{MILES_HEADER}step {r}: {{'train/loss': 0.1, 'train/train_rollout_logprob_abs_diff': inf}}" for r in range(3)]
    st = reported(log)
    assert "trainRolloutLogprobAbsDiffMean" not in st["metrics"]
    verdict = health.evaluate(HealthSpec(), st)
    assert verdict.reason == health.NON_FINITE_METRIC and verdict.message.startswith("train/train_rollout_logprob_abs_diff has been +inf")


def test_only_bounded_entries_are_judged():
    """Entries the CRD would refuse (a key the operator does not watch, a free-text value) say nothing."""
    for entry in (
        {"metric": "rollout/raw_reward; rm -rf", "value": "NaN", "since": 1, "rollout": 3, "streak": 3},
        {"metric": "loss", "value": "NaN and more", "since": 1, "rollout": 3, "streak": 3},
        {"metric": "loss", "value": "NaN", "since": "1", "rollout": 3, "streak": 3},
    ):
        assert health.non_finite({"metrics": {"nonFinite": [entry]}}) is None


def test_non_finite_is_unhealthy_with_an_event_and_feeds_the_gate():
    verdict = health.evaluate(HealthSpec(), reported(miles_lines(0, 4, "nan")))
    out, events = status.compute({"phase": "Running"}, rayjob("Running", "RUNNING"), facts(verdict=verdict))
    cond = {c["type"]: c for c in out["conditions"]}
    assert (cond["TrainingHealthy"]["status"], cond["TrainingHealthy"]["reason"]) == ("False", "NonFiniteMetric")
    assert (cond["Stalled"]["status"], cond["Stalled"]["reason"]) == ("True", "NonFiniteMetric")
    assert "train/loss" in cond["TrainingHealthy"]["message"] and "rollout 0" in cond["TrainingHealthy"]["message"]
    assert [(e.type, e.reason) for e in events] == [("Warning", "NonFiniteMetric")]
    _, again = status.compute(out, rayjob("Running", "RUNNING"), facts(verdict=verdict))
    assert again == []  # one Warning, not one per reconcile
    # Suspend: the RayJob is suspended by the gate; Stop: the reconcile deletes it (the numbers' path)
    assert suspend_reason(job_from(with_spec(health={"stopOnUnhealthy": "Suspend"})), verdict) == HEALTH_SUSPENDED
    assert suspend_reason(job_from(with_spec(health={"stopOnUnhealthy": "Never"})), verdict) is None
    stopped, _ = status.compute({"phase": "Running"}, None, facts(verdict=verdict, stopped_unhealthy=True))
    ready = {c["type"]: c for c in stopped["conditions"]}["Ready"]
    assert (stopped["phase"], ready["reason"]) == ("Failed", "StoppedUnhealthy") and "train/loss" in ready["message"]
