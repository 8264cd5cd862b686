"""A Running job whose reporter has gone quiet is Stalled (NoProgress), with one Warning."""

from __future__ import annotations

import datetime

from lorarl.api.types import HealthSpec
from lorarl.control import health, status
from lorarl.control.queueing import HEALTH_SUSPENDED, rayjob_apply, suspend_reason
from lorarl.job import render

from tests.helpers import job_from, with_spec
from tests.operator.status_table import facts, rayjob

T0 = datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_the_limit_is_the_spec_or_ten_times_the_observed_pace():
    paced = {"progress": {"rollout": 10, "total": 100, "etaSeconds": 27000}}  # 300 s per rollout
    assert health.progress_timeout(HealthSpec(), paced) == 3000
    assert health.progress_timeout(HealthSpec(), {"progress": {"rollout": 10, "total": 100, "etaSeconds": 900}}) == 1800  # at least 30 min
    assert health.progress_timeout(HealthSpec(), {}) == 3600  # pace unknown
    assert health.progress_timeout(HealthSpec(progressTimeoutSeconds=120), paced) == 120


def test_quiet_longer_than_the_limit_is_no_progress_and_sooner_is_a_due_time():
    spec = HealthSpec(progressTimeoutSeconds=120)
    assert health.no_progress(spec, {}, at(0), None, at(60)) == (None, at(120))
    message, due = health.no_progress(spec, {}, at(0), None, at(121))
    assert due is None and message.startswith("no progress reported for 121s while Running (limit 120s")
    # a new attempt (KubeRay's startTime) starts the clock again
    assert health.no_progress(spec, {}, at(0), at(100), at(121)) == (None, at(220))
    assert health.no_progress(spec, {}, None, None, at(121)) == (None, None)


def test_no_progress_stalls_a_running_job_with_one_warning_and_clears_when_it_moves():
    message, _ = health.no_progress(HealthSpec(progressTimeoutSeconds=120), {}, at(0), None, at(500))
    running = rayjob("Running", "RUNNING")
    out, events = status.compute({"phase": "Running"}, running, facts(no_progress=message))
    cond = {c["type"]: c for c in out["conditions"]}
    assert out["phase"] == "Running"
    assert (cond["Stalled"]["status"], cond["Stalled"]["reason"], cond["Ready"]["status"]) == ("True", health.NO_PROGRESS, "False")
    assert [(e.type, e.reason) for e in events] == [("Warning", health.NO_PROGRESS)]
    again, events = status.compute(out, running, facts())
    assert {c["type"]: c["status"] for c in again["conditions"]}["Stalled"] == "False" and events == []


def test_no_progress_feeds_the_health_gate_only_where_the_spec_asks():
    quiet, _ = health.no_progress(HealthSpec(progressTimeoutSeconds=120), {}, at(0), None, at(500))
    ok = health.Verdict("True", "WithinThresholds", "fine")
    # Never (the default): the verdict is the numbers'; NoProgress is the Stalled reason alone
    assert health.gated(ok, quiet, "Never", {}) == ok
    for policy in ("Suspend", "Stop"):
        assert health.gated(ok, quiet, policy, {}) == health.Verdict("False", health.NO_PROGRESS, quiet)
    # suspended for it, the run cannot report: the verdict stays until the policy changes
    out, _ = status.compute(
        {"phase": "Running"}, rayjob("Running", "RUNNING"), facts(verdict=health.Verdict("False", health.NO_PROGRESS, quiet), no_progress=quiet)
    )
    assert health.gated(ok, None, "Suspend", out).reason == health.NO_PROGRESS
    assert health.gated(ok, None, "Never", out) == ok
    assert health.gated(ok, None, "Stop", out) == ok  # Stop has ended the run: nothing to hold
    # Suspend: the RayJob is applied suspended, by the gate (HealthSuspended)
    guarded = job_from(with_spec(health={"stopOnUnhealthy": "Suspend", "progressTimeoutSeconds": 120}))
    verdict = health.gated(ok, quiet, "Suspend", {})
    assert suspend_reason(guarded, verdict) == HEALTH_SUSPENDED
    assert rayjob_apply(render.rayjob(guarded), guarded, {"metadata": {}, "spec": {}, "status": {}}, verdict)[0]["spec"]["suspend"] is True
    # Stop: the reconcile deletes the RayJob; the job fails StoppedUnhealthy, saying why
    stopped, events = status.compute({"phase": "Running"}, None, facts(verdict=verdict, stopped_unhealthy=True))
    ready = {c["type"]: c for c in stopped["conditions"]}["Ready"]
    assert (stopped["phase"], ready["reason"]) == ("Failed", "StoppedUnhealthy") and "no progress reported" in ready["message"]
    assert ("Warning", "Failed") in [(e.type, e.reason) for e in events]
