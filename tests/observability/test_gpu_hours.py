"""Honest GPU-hours over pods as the API server returns them (core/v1 Pod JSON, the fields the
kubelet and the scheduler write): from PodScheduled to the last container's termination."""

from __future__ import annotations

import copy

from lorarl.control.gpuhours import PodLedger, pod_gpu_hours, pod_gpus, released_at, scheduled_at
from lorarl.control.jobmetrics import parse_time

T0 = "2026-12-01T10:00:00Z"


def head_pod(uid="u-head", gpus=8, scheduled=T0, phase="Running", finished=None, deleting=None):
    """A RayCluster head pod of the seed job: the prepare init container (no GPU request of its
    own) and ray-head with amd.com/gpu requests = limits, as the renderer writes them."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "qwen3-4b-lora-amd-x7k2p-head-9zq4d", "namespace": "ml", "uid": uid, "creationTimestamp": "2026-12-01T09:59:58Z"},
        "spec": {
            "initContainers": [{"name": "prepare", "image": "job", "resources": {"requests": {"cpu": "1"}}}],
            "containers": [
                {"name": "ray-head", "image": "job", "resources": {"requests": {"cpu": "16", "amd.com/gpu": str(gpus)}, "limits": {"amd.com/gpu": str(gpus)}}}
            ],
        },
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-12-01T10:00:05Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-01T10:12:00Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled},
            ],
            "initContainerStatuses": [
                {
                    "name": "prepare",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-12-01T10:00:06Z", "finishedAt": "2026-12-01T10:12:00Z"}},
                }
            ],
            "containerStatuses": [{"name": "ray-head", "state": {"running": {"startedAt": "2026-12-01T10:12:01Z"}}}],
        },
    }
    if finished:
        pod["status"]["containerStatuses"][0]["state"] = {
            "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-12-01T10:12:01Z", "finishedAt": finished}
        }
    if deleting:
        pod["metadata"]["deletionTimestamp"] = deleting
    return pod


def test_the_hours_run_from_scheduling_to_the_last_termination_download_included():
    done = head_pod(phase="Succeeded", finished="2026-12-01T12:00:00Z")  # 2 h held, 12 min of it downloading
    assert pod_gpus(done) == 8 and scheduled_at(done) == parse_time(T0)
    assert pod_gpu_hours(done, now=parse_time("2026-12-02T00:00:00Z")) == 16.0  # 8 GPUs x 2 h, not x 1 h 48 min of training
    running = head_pod()
    assert pod_gpu_hours(running, now=parse_time("2026-12-01T10:30:00Z")) == 4.0  # still held: up to now


def test_a_pod_not_scheduled_or_without_gpus_holds_nothing():
    pending = head_pod()
    pending["status"]["conditions"][-1] = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": T0}
    assert pod_gpu_hours(pending, now=parse_time("2026-12-01T11:00:00Z")) == 0.0
    assert pod_gpu_hours(head_pod(gpus=0), now=parse_time("2026-12-01T11:00:00Z")) == 0.0


def test_a_deleted_pod_holds_its_gpus_at_most_to_the_end_of_its_grace_period():
    deleting = head_pod(deleting="2026-12-01T11:00:30Z")
    now = parse_time("2026-12-01T11:05:00Z")
    assert released_at(deleting, now) == parse_time("2026-12-01T11:00:30Z")
    assert pod_gpu_hours(deleting, now) == 8 * (3600 + 30) / 3600


def test_an_init_container_asking_for_more_gpus_than_the_app_sets_the_pods_request():
    pod = head_pod(gpus=2)
    pod["spec"]["initContainers"][0]["resources"] = {"limits": {"amd.com/gpu": "4"}}  # limits only: requests default to them
    assert pod_gpus(pod) == 4


def test_every_attempt_counts_and_the_total_never_decreases_when_pods_go():
    ledger = PodLedger()
    first = head_pod(uid="a1", phase="Failed", finished="2026-12-01T10:30:00Z")  # attempt 1 died after 30 min
    second = head_pod(uid="a2", scheduled="2026-12-01T10:31:00Z")
    worker = copy.deepcopy(second)
    worker["metadata"].update(uid="a2-w", name="qwen3-4b-lora-amd-y8m3q-gpu-group-worker-abcde")
    now = parse_time("2026-12-01T11:31:00Z")
    assert ledger.observe([first, second, worker], now) == 4.0 + 8.0 + 8.0
    # attempt 1's RayCluster is deleted: its pod leaves the API, its hours stay
    assert ledger.observe([second, worker], parse_time("2026-12-01T12:31:00Z")) == 4.0 + 16.0 + 16.0
