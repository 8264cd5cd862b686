"""Pure status mapping: every KubeRay state and reason maps to a defined LoraRLJob state."""

from __future__ import annotations

import pytest

from lorarl import status
from lorarl.health import Verdict

OK = Verdict("True", "WithinThresholds", "fine")
UNKNOWN = Verdict("Unknown", "AwaitingMetrics", "no step yet")
NOW = "2026-11-30T10:00:00Z"


def rayjob(deployment="", job_status="", reason="", message="", **extra):
    st = {"jobDeploymentStatus": deployment, "jobStatus": job_status, "reason": reason, "message": message, **extra}
    return {"metadata": {"name": "j", "creationTimestamp": "2026-11-30T09:00:00Z"}, "status": {k: v for k, v in st.items() if v != ""}}


def facts(**kw):
    base = dict(generation=3, now=NOW, user_suspended=False, queue_name=None, verdict=UNKNOWN)
    base.update(kw)
    return status.Facts(**base)


def conds(st):
    return {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}


# (deployment, jobStatus, reason) -> (phase, reason)
TABLE = [
    (None, None, None, "Pending", "RayJobNotCreated"),
    ("", "", "", "Pending", "RayJobCreated"),
    ("Initializing", "", "", "Preparing", "RayClusterInitializing"),
    ("Waiting", "", "", "Preparing", "WaitingForSubmission"),
    ("Running", "PENDING", "", "Preparing", "JobSubmitted"),
    ("Running", "", "", "Preparing", "JobSubmitted"),
    ("Running", "RUNNING", "", "Running", "Training"),
    ("Running", "SUCCEEDED", "", "Running", "Finishing"),
    ("Complete", "SUCCEEDED", "", "Succeeded", "Succeeded"),
    ("Complete", "STOPPED", "", "Failed", "Stopped"),
    ("Complete", "FAILED", "AppFailed", "Failed", "AppFailed"),
    ("Retrying", "FAILED", "AppFailed", "Preparing", "Retrying"),
    ("Suspending", "", "", "Suspended", "Suspending"),
    ("Suspended", "", "", "Suspended", "Suspended"),
    ("ValidationFailed", "", "ValidationFailed", "Failed", "ValidationFailed"),
    ("SomethingNew", "", "", "Pending", "UnknownRayJobState"),
] + [("Failed", "FAILED", r, "Failed", r) for r in status.KUBERAY_FAILURE_REASONS]


@pytest.mark.parametrize("deployment,job_status,reason,phase,why", TABLE)
def test_mapping_table(deployment, job_status, reason, phase, why):
    rj = None if deployment is None else rayjob(deployment, job_status, reason)
    out, _ = status.compute({}, rj, facts())
    assert (out["phase"], conds(out)["Ready"][1] if phase != "Running" else why) == (phase, why)
    c = conds(out)
    assert c["Failed"][0] == ("True" if phase == "Failed" else "False")
    assert c["Succeeded"][0] == ("True" if phase == "Succeeded" else "False")
    assert c["Stalled"][0] == ("True" if phase == "Failed" else "False")
    assert c["Reconciling"][0] == ("True" if phase in ("Pending", "Preparing", "Running") else "False")
    assert c["Suspended"][0] == ("True" if phase == "Suspended" else "False")
    assert out["observedGeneration"] == 3
    assert all(cond["observedGeneration"] == 3 for cond in out["conditions"])
    assert [cond["type"] for cond in out["conditions"]] == list(status.CONDITION_TYPES)


def test_failed_reason_and_message_reach_conditions():
    out, events = status.compute({"phase": "Running"}, rayjob("Failed", "FAILED", "DeadlineExceeded", "deadline 172800s exceeded"), facts())
    assert conds(out)["Failed"] == ("True", "DeadlineExceeded")
    assert conds(out)["Stalled"] == ("True", "DeadlineExceeded")
    assert [(e.type, e.reason) for e in events] == [("Warning", "Failed")]
    assert "deadline 172800s exceeded" in events[0].message
    assert out["completionTime"] == NOW


def test_running_ready_and_start_time():
    out, events = status.compute({"phase": "Preparing"}, rayjob("Running", "RUNNING", rayClusterName="j-abcde", dashboardURL="j-head-svc:8265", jobId="j-xyz"), facts(verdict=OK))
    assert conds(out)["Ready"] == ("True", "Training")
    assert out["startTime"] == NOW
    assert out["rayJob"] == {"name": "j", "rayClusterName": "j-abcde", "dashboardURL": "j-head-svc:8265", "jobId": "j-xyz", "jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}
    assert [(e.type, e.reason) for e in events] == [("Normal", "Running")]


def test_queued_in_kueue_is_pending_not_suspended():
    out, _ = status.compute({}, rayjob("Suspended"), facts(queue_name="rl-team"))
    assert out["phase"] == "Pending"
    assert conds(out)["Suspended"] == ("True", "Queued")
    assert conds(out)["Reconciling"] == ("True", "Queued")


def test_user_suspend_with_queue_is_suspended():
    out, _ = status.compute({}, rayjob("Suspended"), facts(queue_name="rl-team", user_suspended=True))
    assert out["phase"] == "Suspended" and conds(out)["Suspended"] == ("True", "Suspended")


def test_finished_runs_stay_finished():
    done, _ = status.compute({"phase": "Running"}, rayjob("Complete", "SUCCEEDED", endTime="2026-11-30T09:59:00Z"), facts())
    assert done["completionTime"] == "2026-11-30T09:59:00Z"
    again, events = status.compute(done, None, facts(now="2026-11-30T11:00:00Z"))
    assert again["phase"] == "Succeeded" and again["completionTime"] == "2026-11-30T09:59:00Z"
    assert conds(again)["Succeeded"] == ("True", "Succeeded")
    assert events == []


def test_last_transition_time_moves_only_on_flips():
    first, _ = status.compute({}, rayjob("Initializing"), facts(now="2026-11-30T10:00:00Z"))
    second, _ = status.compute(first, rayjob("Running", "RUNNING"), facts(now="2026-11-30T10:05:00Z", verdict=OK))
    times = {c["type"]: c["lastTransitionTime"] for c in second["conditions"]}
    assert times["Ready"] == "2026-11-30T10:05:00Z"  # False -> True
    assert times["Reconciling"] == "2026-11-30T10:00:00Z"  # still True
    assert times["Failed"] == "2026-11-30T10:00:00Z"  # still False


def test_unhealthy_training_warns_once_and_is_not_ready():
    bad = Verdict("False", "LogprobDiffTooHigh", "mean 0.05 >= 0.03")
    prev, _ = status.compute({"phase": "Running"}, rayjob("Running", "RUNNING"), facts(verdict=OK))
    out, events = status.compute(prev, rayjob("Running", "RUNNING"), facts(verdict=bad))
    assert conds(out)["TrainingHealthy"] == ("False", "LogprobDiffTooHigh")
    assert conds(out)["Ready"] == ("False", "LogprobDiffTooHigh")
    assert [(e.type, e.reason) for e in events] == [("Warning", "LogprobDiffTooHigh")]
    _, again = status.compute(out, rayjob("Running", "RUNNING"), facts(verdict=bad))
    assert again == []


def test_startup_timeout_stalls_without_failing():
    out, events = status.compute({"phase": "Preparing"}, rayjob("Initializing"), facts(startup_timed_out=True))
    assert out["phase"] == "Preparing"
    assert conds(out)["Stalled"] == ("True", "StartupTimeout")
    assert conds(out)["Reconciling"][0] == "False"
    assert [e.reason for e in events] == ["StartupTimeout"]


def test_stopped_unhealthy_fails():
    bad = Verdict("False", "LogprobDiffTooHigh", "mean 0.05 >= 0.03")
    out, _ = status.compute({"phase": "Running"}, None, facts(verdict=bad, stopped_unhealthy=True))
    assert out["phase"] == "Failed" and conds(out)["Failed"] == ("True", "StoppedUnhealthy")


def test_invalid_spec_stalls():
    out, _ = status.compute({}, None, facts(invalid_spec="spec.lora.rank: too small"))
    assert conds(out)["Stalled"] == ("True", "InvalidSpec") and out["phase"] == "Pending"


def test_changed():
    out, _ = status.compute({}, rayjob("Initializing"), facts())
    assert status.changed({}, out)
    assert not status.changed({**out, "progress": {"rollout": 3}}, out)  # reporter fields are not ours


def test_every_written_key_is_in_the_schema():
    """A key the CRD does not declare is silently pruned by the API server: catch it here."""
    from lorarl import api

    rj = rayjob("Running", "RUNNING", rayClusterName="c", dashboardURL="d:8265", jobId="i", failed=1, succeeded=0, reason="AppFailed", message="m")
    out, _ = status.compute({}, rj, facts(verdict=OK))
    parsed = api.LoraRLJobStatus.model_validate(out)
    assert parsed.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False) == {**out, "conditions": out["conditions"]}
