"""The driver gone while KubeRay still says RUNNING (DriverLost), judged from the pods alone.

The head pod is a recording of the real kubelet's (tests/operator/recorded_pods/
ray-head-restarted-once-running.json: a Ray head whose container exited 1 at 03:52:27 and was
restarted, KubeRay's labels on it), cut as the operator's cache cuts it (pods.trim_pod); the
RayJob status is KubeRay v1.5.0's shape (rayClusterName, rayJobInfo.startTime: rayjob_controller.go:340).
"""

from __future__ import annotations

import copy
import datetime
import json
import pathlib

from lorarl.control import cache, driver, health, pods, status
from lorarl.control.queueing import HEALTH_SUSPENDED, suspend_reason

from tests.helpers import job_from, with_spec
from tests.operator.status_table import OK, facts

RECORDED = json.loads((pathlib.Path(__file__).resolve().parent / "recorded_pods" / "ray-head-restarted-once-running.json").read_text())
HEAD = pods.trim_pod(RECORDED)
CLUSTER = RECORDED["metadata"]["labels"]["ray.io/cluster"]  # f-exit-2zfbv
ENDED = datetime.datetime(2026, 12, 2, 3, 52, 27, tzinfo=datetime.UTC)  # its lastState.terminated.finishedAt


def at(seconds: float) -> datetime.datetime:
    return ENDED + datetime.timedelta(seconds=seconds)


def rayjob(started: str | None, deployment: str = "Running", job_status: str = "RUNNING", cluster: str = CLUSTER) -> dict:
    st = {"jobDeploymentStatus": deployment, "jobStatus": job_status, "rayClusterName": cluster, "jobId": "f-exit-abcde"}
    if started:
        st["rayJobInfo"] = {"startTime": started}
    return {"metadata": {"name": "f-exit"}, "status": st}


def test_a_head_restart_before_the_job_started_is_not_a_lost_driver():
    """The recording's own case: the raylet missed its registration, the head restarted, then the job ran."""
    assert driver.lost(rayjob("2026-12-02T03:53:10Z"), [HEAD], at(3600)) == (None, None)


def test_a_head_restart_after_the_job_started_loses_the_driver_after_the_grace():
    job = rayjob("2026-12-02T03:50:00Z")
    assert driver.lost(job, [HEAD], at(59)) == (None, at(driver.GRACE_SECONDS))
    message, due = driver.lost(job, [HEAD], at(61))
    assert due is None
    assert message.startswith(
        f"the driver is gone: the Ray container ray-head of head pod {RECORDED['metadata']['name']} ended at 2026-12-02T03:52:27Z (exit code 1, Error; 1 restart)"
    )
    assert "RayJob f-exit still says RUNNING" in message and "spec.suspend" in message
    # the same second counts (finishedAt has whole seconds, the Ray job's start milliseconds)
    assert driver.lost(rayjob("2026-12-02T03:52:27.400Z"), [HEAD], at(61))[0] is not None


def test_without_the_ray_jobs_start_a_restart_is_not_judged():
    assert driver.lost(rayjob(None), [HEAD], at(3600)) == (None, None)


def test_only_a_running_ray_job_of_the_current_cluster_is_judged():
    for job in (
        rayjob("2026-12-02T03:50:00Z", "Running", "PENDING"),
        rayjob("2026-12-02T03:50:00Z", "Complete", "SUCCEEDED"),
        rayjob("2026-12-02T03:50:00Z", "Retrying", "RUNNING"),
    ):
        assert driver.lost(job, [HEAD], at(3600)) == (None, None)
    assert driver.lost(rayjob("2026-12-02T03:50:00Z"), None, at(3600)) == (None, None)  # pods not listed
    # a head of an earlier attempt's cluster says nothing about this one's; a head never seen is not judged
    assert driver.lost(rayjob("2026-12-02T03:50:00Z", cluster="f-exit-zzzzz"), [HEAD], at(3600)) == (None, None)
    assert driver.lost(rayjob("2026-12-02T03:50:00Z"), [], at(3600)) == (None, None)


def test_a_head_being_deleted_or_seen_deleted_loses_the_driver():
    deleting = copy.deepcopy(HEAD)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-02T04:00:30Z"  # the end of its grace period
    job = rayjob("2026-12-02T03:53:10Z")
    assert driver.lost(job, [deleting], at(400)) == (None, datetime.datetime(2026, 12, 2, 4, 1, 30, tzinfo=datetime.UTC))
    assert "is being deleted (deletionTimestamp 2026-12-02T04:00:30Z)" in driver.lost(job, [deleting], at(600))[0]
    # gone: the cache remembers when it went (here: its deletionTimestamp), KubeRay does not re-create it
    caches = cache.Caches()
    caches.pods.put(copy.deepcopy(RECORDED) | {"metadata": {**RECORDED["metadata"], "deletionTimestamp": "2026-12-02T04:00:30Z"}})
    caches.forget_pod(RECORDED)
    gone = caches.gone_heads(RECORDED["metadata"]["namespace"], "f-exit")
    assert gone == {CLUSTER: {"name": RECORDED["metadata"]["name"], "at": "2026-12-02T04:00:30Z"}}
    message, _ = driver.lost(job, [], at(600), gone)
    assert message.startswith(f"the driver is gone: the Ray head pod {RECORDED['metadata']['name']} of RayCluster {CLUSTER} was deleted")


def test_driver_lost_stalls_with_one_warning_and_feeds_the_gate_only_where_asked():
    lost, _ = driver.lost(rayjob("2026-12-02T03:50:00Z"), [HEAD], at(61))
    running = rayjob("2026-12-02T03:50:00Z")
    out, events = status.compute({"phase": "Running"}, running, facts(verdict=OK, driver_lost=lost))
    cond = {c["type"]: c for c in out["conditions"]}
    assert out["phase"] == "Running"
    assert (cond["Stalled"]["status"], cond["Stalled"]["reason"], cond["Ready"]["reason"]) == ("True", "DriverLost", "DriverLost")
    assert cond["TrainingHealthy"]["status"] == "True"  # Never (the default): a Stalled reason, not a verdict
    assert [(e.type, e.reason) for e in events] == [("Warning", "DriverLost")]
    assert status.compute(out, running, facts(verdict=OK, driver_lost=lost))[1] == []
    # the gate: Suspend or Stop make it TrainingHealthy=False DriverLost; Suspend holds it (no cluster, no driver)
    for policy in ("Suspend", "Stop"):
        assert health.gated(OK, None, policy, {}, lost) == health.Verdict("False", driver.DRIVER_LOST, lost)
    assert health.gated(OK, "quiet too", "Stop", {}, lost).reason == driver.DRIVER_LOST  # the more precise of the two
    held, _ = status.compute({"phase": "Running"}, running, facts(verdict=health.Verdict("False", driver.DRIVER_LOST, lost), driver_lost=lost))
    assert health.gated(OK, None, "Suspend", held) == health.Verdict("False", driver.DRIVER_LOST, lost)
    assert health.gated(OK, None, "Never", held) == OK
    verdict = health.gated(OK, None, "Suspend", {}, lost)
    assert suspend_reason(job_from(with_spec(health={"stopOnUnhealthy": "Suspend"})), verdict) == HEALTH_SUSPENDED
    stopped, _ = status.compute({"phase": "Running"}, None, facts(verdict=verdict, stopped_unhealthy=True))
    ready = {c["type"]: c for c in stopped["conditions"]}["Ready"]
    assert (stopped["phase"], ready["reason"]) == ("Failed", "StoppedUnhealthy") and "the driver is gone" in ready["message"]
