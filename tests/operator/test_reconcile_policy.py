"""Pure decisions of the reconciler."""

from __future__ import annotations

import datetime

from lorarl.health import Verdict
from lorarl import render
from lorarl.queueing import CREATE_MANAGER, rayjob_apply
from lorarl.kube import FIELD_MANAGER
from lorarl.reconcile import startup_timed_out, suspend_drifted
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


def applied_suspend(job, live, verdict):
    """(spec.suspend in the applied RayJob, or "absent"; the field manager)."""
    obj, manager = rayjob_apply(render.rayjob(job), job, live, verdict)
    return obj["spec"].get("suspend", "absent"), manager


def test_who_writes_the_rayjob_suspend():
    plain = job_from(with_spec())
    assert applied_suspend(plain, rj(), OK) == (False, FIELD_MANAGER)
    assert applied_suspend(job_from(with_spec(suspend=True)), rj(), OK) == (True, FIELD_MANAGER)
    guarded = job_from(with_spec(health={"stopOnUnhealthy": "Suspend"}))
    assert applied_suspend(guarded, rj(), BAD) == (True, FIELD_MANAGER)
    assert applied_suspend(guarded, rj(), OK) == (False, FIELD_MANAGER)
    queued = job_from(with_spec(scheduling={"queueName": "q"}))
    assert applied_suspend(queued, None, OK) == (True, CREATE_MANAGER)  # a new queued RayJob starts suspended
    # once it exists Kueue owns the field: whatever it is, and whatever the operator wants
    for live in (rj(suspend=False), rj(suspend=True)):
        assert applied_suspend(queued, live, OK) == ("absent", FIELD_MANAGER)
        assert applied_suspend(job_from(with_spec(scheduling={"queueName": "q"}, suspend=True)), live, OK) == ("absent", FIELD_MANAGER)
        assert suspend_drifted(queued, live, OK) is False
    assert suspend_drifted(plain, rj(suspend=True), OK) is True
    assert suspend_drifted(guarded, rj(suspend=False), BAD) is True


def test_startup_timeout_counts_from_the_current_attempt():
    job = job_from(with_spec(runPolicy={"startupTimeoutSeconds": 3600}))
    assert startup_timed_out(job, rj(), NOW) is True  # created 2 h ago, never started
    assert startup_timed_out(job, rj(start="2026-11-30T11:30:00Z"), NOW) is False  # resumed 30 min ago
    assert startup_timed_out(job, None, NOW) is False
