"""Pure decisions of the reconciler."""

from __future__ import annotations

import datetime

from lorarl.control.health import Verdict
from lorarl.control.queueing import CREATE_MANAGER, rayjob_apply
from lorarl.control.reconcile import startup_timed_out, suspend_drifted
from lorarl.job import render
from lorarl.runtime.kube import FIELD_MANAGER

from tests.helpers import job_from, with_spec

OK = Verdict("True", "WithinThresholds", "")
BAD = Verdict("False", "LogprobDiffTooHigh", "")
NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)


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


def test_next_check_is_the_startup_deadline_of_a_job_not_yet_running():
    from lorarl.control.reconcile import next_check

    job = job_from(with_spec(runPolicy={"startupTimeoutSeconds": 3600}))
    pending = {"phase": "Pending", "conditions": []}
    # created 2 h ago, started 30 min ago: due in 30 min (+1 s past the whole-second deadline)
    assert next_check(job, rj(start="2026-11-30T11:30:00Z"), pending, NOW) == 1801.0
    assert next_check(job, None, pending, NOW) is None  # no RayJob yet: its creation is an event
    running = {"phase": "Running", "conditions": []}
    assert next_check(job, rj(start="2026-11-30T11:30:00Z"), running, NOW) is None
    timed_out = {"phase": "Preparing", "conditions": [{"type": "Stalled", "status": "True", "reason": "StartupTimeout"}]}
    assert next_check(job, rj(), timed_out, NOW) is None  # already reported: nothing more to wait for


def test_ttl_after_finished_is_opt_in_and_counts_from_completion():
    from lorarl.control.reconcile import next_check, ttl_expiry

    done = {"phase": "Succeeded", "completionTime": "2026-11-30T11:59:00Z"}
    assert ttl_expiry(job_from(with_spec()), done) is None  # unset: kept
    job = job_from(with_spec(ttlSecondsAfterFinished=300))
    assert ttl_expiry(job, done) == datetime.datetime(2026, 11, 30, 12, 4, tzinfo=datetime.UTC)
    assert ttl_expiry(job, {"phase": "Running"}) is None
    assert next_check(job, None, done, NOW) == 241.0
    assert next_check(job, None, {**done, "phase": "Failed"}, NOW) == 241.0
    assert ttl_expiry(job_from(with_spec(ttlSecondsAfterFinished=0)), done) < NOW


def test_a_deadline_already_past_schedules_nothing():
    from lorarl.control.reconcile import next_check

    job = job_from(with_spec(runPolicy={"startupTimeoutSeconds": 3600}, scheduling={"queueName": "q"}))
    # created 2 h ago and queued (not stalled while Kueue holds it): no timer in a loop
    assert next_check(job, rj(), {"phase": "Pending", "conditions": []}, NOW) is None


def test_a_ttl_already_past_when_the_job_finishes_is_due_at_once():
    from lorarl.control.reconcile import next_check

    job = job_from(with_spec(ttlSecondsAfterFinished=0))
    # the reconcile that writes the finished status: the next one (from the queue) deletes
    assert next_check(job, None, {"phase": "Failed", "completionTime": "2026-11-30T12:00:00Z"}, NOW) == 1.0
