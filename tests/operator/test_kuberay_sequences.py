"""KubeRay v1.5.0's full RayJob status sequences through the pure mapping: the phases and
Events a LoraRLJob shows for a first run, a retry, a suspend/resume, a deadline and a Kueue
admission. The RayJob statuses and the expected phases are written by hand here from
ray-operator@v1.5.0 controllers/ray/rayjob_controller.go ("rjc:N"); the stand-in
(lorarl_dev.kuberay_sim) must write the same jobDeploymentStatus sequence and fields
(tests/operator/test_real_kuberay.py checks it against the real operator)."""

from __future__ import annotations

import pytest
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.operator.kuberay_steps import T1, MemoryKube, walk

T0 = "2026-11-30T10:00:00Z"

# one step: (RayJob spec.suspend, RayJob status as KubeRay wrote it (None: no RayJob yet),
#            LoraRLJob spec.suspend, expected phase)
CREATED = (False, {}, False, "Pending")
FIRST_RUN = [
    (False, None, False, "Pending"),
    CREATED,
    (
        False,
        {"jobDeploymentStatus": "Initializing", "jobId": "j-1", "rayClusterName": "c-1", "startTime": T0, "failed": 0, "succeeded": 0},
        False,
        "Preparing",
    ),  # rjc:820-850
    (
        False,
        {"jobDeploymentStatus": "Running", "jobId": "j-1", "rayClusterName": "c-1", "dashboardURL": "u", "startTime": T0, "failed": 0, "succeeded": 0},
        False,
        "Preparing",
    ),  # rjc:204-228
    (
        False,
        {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "jobId": "j-1",
            "rayClusterName": "c-1",
            "dashboardURL": "u",
            "startTime": T0,
            "failed": 0,
            "succeeded": 0,
        },
        False,
        "Running",
    ),  # rjc:313-344
]
SUCCESS = FIRST_RUN + [
    (
        False,
        {
            "jobDeploymentStatus": "Complete",
            "jobStatus": "SUCCEEDED",
            "jobId": "j-1",
            "rayClusterName": "c-1",
            "dashboardURL": "u",
            "startTime": T0,
            "endTime": T1,
            "failed": 0,
            "succeeded": 1,
        },
        False,
        "Succeeded",
    ),
]
# backoffLimit 1: the failed attempt is written as Retrying directly (rjc:420, 510-522), then
# New with the run's fields reset (rjc:368-384), then a new cluster (rjc:820-850)
RETRY = FIRST_RUN + [
    (
        False,
        {
            "jobDeploymentStatus": "Retrying",
            "jobStatus": "FAILED",
            "reason": "AppFailed",
            "message": "exit 1",
            "jobId": "j-1",
            "rayClusterName": "c-1",
            "dashboardURL": "u",
            "startTime": T0,
            "failed": 1,
            "succeeded": 0,
        },
        False,
        "Preparing",
    ),
    (False, {"jobDeploymentStatus": "", "startTime": T0, "failed": 1, "succeeded": 0}, False, "Preparing"),
    (False, {"jobDeploymentStatus": "Initializing", "jobId": "j-2", "rayClusterName": "c-2", "startTime": T1, "failed": 1, "succeeded": 0}, False, "Preparing"),
    (
        False,
        {"jobDeploymentStatus": "Running", "jobId": "j-2", "rayClusterName": "c-2", "dashboardURL": "u2", "startTime": T1, "failed": 1, "succeeded": 0},
        False,
        "Preparing",
    ),
    (
        False,
        {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "jobId": "j-2",
            "rayClusterName": "c-2",
            "dashboardURL": "u2",
            "startTime": T1,
            "failed": 1,
            "succeeded": 0,
        },
        False,
        "Running",
    ),
    (
        False,
        {
            "jobDeploymentStatus": "Failed",
            "jobStatus": "FAILED",
            "reason": "AppFailed",
            "message": "exit 1",
            "jobId": "j-2",
            "rayClusterName": "c-2",
            "dashboardURL": "u2",
            "startTime": T1,
            "endTime": T1,
            "failed": 2,
            "succeeded": 0,
        },
        False,
        "Failed",
    ),
]
RUNNING = FIRST_RUN[-1][1]
SUSPEND_RESUME = FIRST_RUN + [
    (True, RUNNING, True, "Running"),  # asked, KubeRay not there yet (SuspendRequested)
    (True, {**RUNNING, "jobDeploymentStatus": "Suspending"}, True, "Suspended"),  # rjc:238, 964-981
    (True, {"jobDeploymentStatus": "Suspended", "startTime": T0, "failed": 0, "succeeded": 0}, True, "Suspended"),  # rjc:368-381
    (False, {"jobDeploymentStatus": "Suspended", "startTime": T0, "failed": 0, "succeeded": 0}, False, "Suspended"),  # Resuming
    (False, {"jobDeploymentStatus": "", "startTime": T0, "failed": 0, "succeeded": 0}, False, "Preparing"),  # rjc:385-391
    (False, {"jobDeploymentStatus": "Initializing", "jobId": "j-2", "rayClusterName": "c-2", "startTime": T1, "failed": 0, "succeeded": 0}, False, "Preparing"),
    (
        False,
        {"jobDeploymentStatus": "Running", "jobId": "j-2", "rayClusterName": "c-2", "dashboardURL": "u2", "startTime": T1, "failed": 0, "succeeded": 0},
        False,
        "Preparing",
    ),
    (
        False,
        {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "jobId": "j-2",
            "rayClusterName": "c-2",
            "dashboardURL": "u2",
            "startTime": T1,
            "failed": 0,
            "succeeded": 0,
        },
        False,
        "Running",
    ),
]
# activeDeadlineSeconds passed before the cluster was ready: Failed even with retries left (rjc:184, 511-518)
DEADLINE = FIRST_RUN[:3] + [
    (
        False,
        {
            "jobDeploymentStatus": "Failed",
            "reason": "DeadlineExceeded",
            "message": "The RayJob has passed the activeDeadlineSeconds.",
            "jobId": "j-1",
            "rayClusterName": "c-1",
            "startTime": T0,
            "endTime": T1,
            "failed": 1,
            "succeeded": 0,
        },
        False,
        "Failed",
    ),
]
# created suspended for Kueue: New -> Initializing -> Suspending -> Suspended (rjc:166-180, 345-381), admitted: New
INIT = FIRST_RUN[2][1]
KUEUE = [
    (True, None, False, "Pending"),
    (True, {}, False, "Pending"),
    (True, INIT, False, "Pending"),
    (True, {**INIT, "jobDeploymentStatus": "Suspending"}, False, "Pending"),
    (True, {"jobDeploymentStatus": "Suspended", "startTime": T0, "failed": 0, "succeeded": 0}, False, "Pending"),
    (False, {"jobDeploymentStatus": "Suspended", "startTime": T0, "failed": 0, "succeeded": 0}, False, "Pending"),  # admitted, KubeRay not there yet
    (False, {"jobDeploymentStatus": "", "startTime": T0, "failed": 0, "succeeded": 0}, False, "Preparing"),
    (False, {"jobDeploymentStatus": "Initializing", "jobId": "j-2", "rayClusterName": "c-2", "startTime": T1, "failed": 0, "succeeded": 0}, False, "Preparing"),
]
SEQUENCES = {
    "success": (SUCCESS, None, ["Pending", "Preparing", "Running", "Succeeded"]),
    "retry": (RETRY, None, ["Pending", "Preparing", "Running", "Preparing", "Running", "Failed"]),
    "suspend-resume": (SUSPEND_RESUME, None, ["Pending", "Preparing", "Running", "Suspended", "Preparing", "Running"]),
    "deadline": (DEADLINE, None, ["Pending", "Preparing", "Failed"]),
    "kueue": (KUEUE, "rl-team", ["Pending", "Preparing"]),
}


@pytest.mark.parametrize("name", SEQUENCES)
def test_sequence_phases_and_events(name):
    steps, queue, transitions = SEQUENCES[name]
    phases, events = walk(steps, queue)
    assert phases == [s[3] for s in steps]
    # one Event per real transition, none for a step that keeps the phase
    assert events == [("Warning" if p == "Failed" else "Normal", p) for p in transitions]


@pytest.mark.parametrize("name", ["retry", "suspend-resume", "kueue"])
def test_new_on_restart_does_not_flap_back_to_pending(name):
    phases, _ = walk(SEQUENCES[name][0], SEQUENCES[name][1])
    first_preparing = phases.index("Preparing")
    assert "Pending" not in phases[first_preparing:]


def shape(st):
    """What a step says besides names and times: deployment, job status, reason, which fields are set."""
    return (
        st.get("jobDeploymentStatus", ""),
        st.get("jobStatus", ""),
        st.get("reason", ""),
        st.get("failed"),
        st.get("succeeded"),
        tuple(sorted(k for k in st if k in ("jobId", "rayClusterName", "dashboardURL", "startTime", "endTime"))),
    )


def kuberay_writes(steps):
    """The status writes KubeRay made in a hand-written sequence (a step that only changes a
    spec repeats the previous status)."""
    writes = []
    for _, st, _, _ in steps:
        if st and (not writes or st != writes[-1]):
            writes.append(st)
    return writes


def test_stand_in_writes_the_retry_sequence():
    kube = MemoryKube({"backoffLimit": 1})
    ray = FakeKubeRay(kube, "ns", "j")
    ray.initializing()
    ray.submitted()
    ray.running()
    first_cluster = ray.cluster
    assert ray.app_failed(message="exit 1")["jobDeploymentStatus"] == "Retrying"
    ray.new_attempt()
    ray.initializing()
    ray.submitted()
    ray.running()
    ray.app_failed(message="exit 1")
    assert [shape(w) for w in ray.writes] == [shape(s) for s in kuberay_writes(RETRY)]
    assert ray.cluster != first_cluster and kube.obj["status"] == ray.status


def test_stand_in_writes_the_suspend_resume_sequence():
    kube = MemoryKube({})
    ray = FakeKubeRay(kube, "ns", "j")
    ray.initializing()
    ray.submitted()
    ray.running()
    ray.suspending()
    ray.suspended()
    ray.resumed()
    ray.initializing()
    ray.submitted()
    ray.running()
    assert [shape(w) for w in ray.writes] == [shape(s) for s in kuberay_writes(SUSPEND_RESUME)]


def test_stand_in_deadline_is_not_retried():
    kube = MemoryKube({"backoffLimit": 3, "activeDeadlineSeconds": 60})
    ray = FakeKubeRay(kube, "ns", "j")
    ray.initializing()
    final = ray.deadline_exceeded()
    assert [shape(w) for w in ray.writes] == [shape(s) for s in kuberay_writes(DEADLINE)]
    assert "ActiveDeadlineSeconds: 60" in final["message"]
