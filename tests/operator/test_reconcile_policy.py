"""Pure decisions of the reconciler."""

from __future__ import annotations

import datetime

from lorarl.health import Verdict
from lorarl.reconcile import desired_suspend, startup_timed_out
from tests.helpers import job_from, with_spec

OK = Verdict("True", "WithinThresholds", "")
BAD = Verdict("False", "LogprobDiffTooHigh", "")
NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)


def rj(suspend=None, created="2026-11-30T10:00:00Z", start=None):
    out = {"metadata": {"creationTimestamp": created}, "spec": {}, "status": {}}
    if suspend is not None:
        out["spec"]["suspend"] = suspend
    if start:
        out["status"]["startTime"] = start
    return out


def test_desired_suspend():
    plain = job_from(with_spec())
    assert desired_suspend(plain, rj(), OK) is False
    assert desired_suspend(job_from(with_spec(suspend=True)), rj(), OK) is True
    guarded = job_from(with_spec(health={"stopOnUnhealthy": "Suspend"}))
    assert desired_suspend(guarded, rj(), BAD) is True and desired_suspend(guarded, rj(), OK) is False
    queued = job_from(with_spec(scheduling={"queueName": "q"}))
    assert desired_suspend(queued, None, OK) is True  # a new queued RayJob starts suspended
    assert desired_suspend(queued, rj(suspend=False), OK) is False  # Kueue admitted it: leave it
    assert desired_suspend(queued, rj(suspend=True), OK) is True


def test_startup_timeout_counts_from_the_current_attempt():
    job = job_from(with_spec(runPolicy={"startupTimeoutSeconds": 3600}))
    assert startup_timed_out(job, rj(), NOW) is True  # created 2 h ago, never started
    assert startup_timed_out(job, rj(start="2026-11-30T11:30:00Z"), NOW) is False  # resumed 30 min ago
    assert startup_timed_out(job, None, NOW) is False
