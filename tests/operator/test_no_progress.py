"""A Running job whose reporter has gone quiet is Stalled (NoProgress), with one Warning."""

from __future__ import annotations

import datetime

from lorarl.api.types import HealthSpec
from lorarl.control import health, status

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
