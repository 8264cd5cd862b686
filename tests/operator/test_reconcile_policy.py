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


def test_next_check_is_the_startup_deadline_of_a_job_not_yet_running():
    from lorarl.reconcile import next_check

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
    from lorarl.reconcile import next_check, ttl_expiry

    done = {"phase": "Succeeded", "completionTime": "2026-11-30T11:59:00Z"}
    assert ttl_expiry(job_from(with_spec()), done) is None  # unset: kept
    job = job_from(with_spec(ttlSecondsAfterFinished=300))
    assert ttl_expiry(job, done) == datetime.datetime(2026, 11, 30, 12, 4, tzinfo=datetime.timezone.utc)
    assert ttl_expiry(job, {"phase": "Running"}) is None
    assert next_check(job, None, done, NOW) == 241.0
    assert next_check(job, None, {**done, "phase": "Failed"}, NOW) == 241.0
    assert ttl_expiry(job_from(with_spec(ttlSecondsAfterFinished=0)), done) < NOW


def test_a_deadline_already_past_schedules_nothing():
    from lorarl.reconcile import next_check

    job = job_from(with_spec(runPolicy={"startupTimeoutSeconds": 3600}, scheduling={"queueName": "q"}))
    # created 2 h ago and queued (not stalled while Kueue holds it): no timer in a loop
    assert next_check(job, rj(), {"phase": "Pending", "conditions": []}, NOW) is None


def test_a_ttl_already_past_when_the_job_finishes_is_due_at_once():
    from lorarl.reconcile import next_check

    job = job_from(with_spec(ttlSecondsAfterFinished=0))
    # the reconcile that writes the finished status: the next one (from the queue) deletes
    assert next_check(job, None, {"phase": "Failed", "completionTime": "2026-11-30T12:00:00Z"}, NOW) == 1.0
