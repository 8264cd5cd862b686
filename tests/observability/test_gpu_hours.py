"""Honest GPU-hours over pods as the API server returns them (core/v1 Pod JSON, the fields the
kubelet and the scheduler write): from PodScheduled to the last container's termination."""

from __future__ import annotations

import copy

from lorarl.control.gpuhours import account, pod_gpu_hours, pod_gpus, recorded_holding, released_at, scheduled_at
from lorarl.control.pods import trim_pod
from lorarl.control.times import unix_seconds as parse_time

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


def status_after(previous, usage):
    """The stored status after the operator wrote ``usage`` (a merge patch of its fields)."""
    if usage is None:
        return previous
    return {**previous, "gpuAccounting": usage.fields["gpuAccounting"], "progress": {**previous.get("progress", {}), **usage.fields["progress"]}}


def at(text):
    return parse_time(text)


def test_every_attempt_counts_and_the_total_never_decreases_when_pods_go():
    """A recorded sequence of one job's pods over two attempts (KubeRay retries with a new
    RayCluster: attempt 1's pods are deleted), each step as the watch delivers it."""
    first = head_pod(uid="a1")
    st = status_after({"progress": {"rollout": 3}}, account({"progress": {"rollout": 3}}, [first], {}, at("2026-12-01T10:10:00Z")))
    assert st["progress"] == {"rollout": 3, "gpuHours": round(8 * 10 / 60, 4)}  # the reporter's keys stay
    assert st["gpuAccounting"]["pods"][0]["holding"] is True
    died = head_pod(uid="a1", phase="Failed", finished="2026-12-01T10:30:00Z")  # attempt 1 died after 30 min
    usage = account(st, [died], {}, at("2026-12-01T10:30:05Z"))
    assert usage.due and not usage.holding and usage.total == 4.0
    st = status_after(st, usage)
    # its RayCluster is deleted: the pod leaves the API; its last state came with the DELETED event
    second = head_pod(uid="a2", scheduled="2026-12-01T10:31:00Z")
    worker = copy.deepcopy(second)
    worker["metadata"].update(uid="a2-w", name="qwen3-4b-lora-amd-y8m3q-gpu-group-worker-abcde")
    usage = account(st, [second, worker], {"a1": died}, at("2026-12-01T11:31:00Z"))
    assert usage.total == 4.0 + 8.0 + 8.0 and usage.folded == {"a1"}
    assert usage.fields["gpuAccounting"]["settledHours"] == 4.0
    st = status_after(st, usage)
    # an operator restart: nothing in memory, the same status, the pods recomputed from their timestamps
    assert account(st, [second, worker], {}, at("2026-12-01T12:31:00Z")).total == 4.0 + 16.0 + 16.0


def test_a_release_reported_late_counts_from_the_kubelets_times_not_from_the_last_write():
    """The kubelet reports an end a few seconds after it: a write that fell in between counted
    those seconds; the report corrects them, for a pod still present and for one already gone."""
    st = status_after({}, account({}, [head_pod(uid="a1")], {}, at("2026-12-01T10:30:09Z")))  # still running as far as the API says
    assert st["progress"]["gpuHours"] == round(8 * (30 * 60 + 9) / 3600, 4)
    ended = head_pod(uid="a1", phase="Failed", finished="2026-12-01T10:30:00Z")  # reported at 10:30:10: it ended at 10:30:00
    usage = account(st, [ended], {}, at("2026-12-01T10:30:10Z"))
    assert usage.total == 4.0 and usage.due and not usage.holding
    gone = head_pod(uid="a1", deleting="2026-12-01T10:30:00Z")  # or deleted, its grace period over before the last write
    assert account(st, [], {"a1": gone}, at("2026-12-01T10:31:00Z")).fields["gpuAccounting"]["settledHours"] == 4.0
    # while it holds, what was recorded is a floor (a restart never counts less than was written)
    assert account(st, [head_pod(uid="a1")], {}, at("2026-12-01T10:30:05Z")).total == st["progress"]["gpuHours"]


def test_the_pods_as_the_cache_keeps_them_give_the_same_hours():
    pods = [head_pod(uid="a1", phase="Failed", finished="2026-12-01T10:30:00Z"), head_pod(uid="a2", deleting="2026-12-01T11:00:30Z")]
    now = at("2026-12-01T12:00:00Z")
    assert account({}, [trim_pod(p) for p in pods], {}, now).fields == account({}, pods, {}, now).fields


def test_a_pod_force_deleted_between_two_looks_counts_from_its_last_state():
    """Deleted with no grace period: no reconcile saw it terminate; the DELETED event's state does."""
    running = head_pod(uid="a1")
    st = status_after({}, account({}, [running], {}, at("2026-12-01T10:20:00Z")))
    gone = head_pod(uid="a1", deleting="2026-12-01T10:45:00Z")
    usage = account(st, [], {"a1": gone}, at("2026-12-01T10:50:00Z"))
    assert usage.total == 8 * 45 / 60 and usage.fields["gpuAccounting"]["pods"] == []
    # without its last state (the event was missed, e.g. across a restart): what was recorded
    assert account(st, [], {}, at("2026-12-01T10:50:00Z")).total == round(8 * 20 / 60, 4)
    # a pod that came and went between two looks
    blip = head_pod(uid="b1", scheduled="2026-12-01T10:00:00Z", deleting="2026-12-01T10:06:00Z")
    assert account({}, [], {"b1": blip}, at("2026-12-01T11:00:00Z")).total == 0.8


def test_a_write_is_due_at_transitions_and_once_a_minute_of_gpus_not_per_look():
    pod = head_pod(uid="a1")
    st = status_after({}, account({}, [pod], {}, at("2026-12-01T10:20:30Z")))
    assert not account(st, [pod], {}, at("2026-12-01T10:21:00Z")).due  # 30 s more: not worth a write of its own
    assert account(st, [pod], {}, at("2026-12-01T10:21:30Z")).due  # a minute more
    assert account(st, [pod, head_pod(uid="a2")], {}, at("2026-12-01T10:20:40Z")).due  # a pod more
    done = head_pod(uid="a1", phase="Succeeded", finished="2026-12-01T10:20:40Z")
    assert account(st, [done], {}, at("2026-12-01T10:20:41Z")).due  # released


def test_nothing_to_count_without_scheduled_gpu_pods_and_a_predecessors_pods_are_not_the_jobs():
    pending = head_pod()
    pending["status"]["conditions"][-1] = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": T0}
    assert account({}, [pending, head_pod(uid="cpu", gpus=0)], {}, at("2026-12-01T11:00:00Z")) is None
    old = head_pod(uid="old")  # created 09:59:58, before a job of the same name created at 10:05
    assert account({}, [old], {}, at("2026-12-01T11:00:00Z"), since=at("2026-12-01T10:05:00Z")) is None


def test_a_finished_job_stays_whole_while_its_pods_hold_gpus():
    from lorarl.control.reconcile import settled_finished

    st = status_after({"phase": "Succeeded", "observedGeneration": 1}, account({}, [head_pod(uid="a1")], {}, at("2026-12-01T11:00:00Z")))
    assert recorded_holding(st) and not settled_finished({"metadata": {"generation": 1}, "status": st})
    st = status_after(st, account(st, [], {}, at("2026-12-01T11:01:00Z")))
    assert not recorded_holding(st) and settled_finished({"metadata": {"generation": 1}, "status": st})


def _run_ended_and_cluster_deleted(deleted_at: str, grace_end: str):
    """The seed job's head from its scheduling (10:00:00) through the run's end (KubeRay's
    endTime 11:00:00) to the deletion of its RayCluster at ``deleted_at``: the pod being deleted
    (Ray's container outlives its SIGTERM to the end of the grace period, ``grace_end``), then
    gone, its last state delivered with the DELETED event. Returns the settled status."""
    st = status_after({}, account({}, [head_pod(uid="h1")], {}, at("2026-12-01T10:59:30Z")))  # training
    st = status_after(st, account(st, [head_pod(uid="h1")], {}, at("2026-12-01T11:00:00Z")))  # the run ends
    deleting = head_pod(uid="h1", deleting=grace_end)
    after_delete = at(deleted_at) + 2
    usage = account(st, [deleting], {}, after_delete)
    assert usage.holding and usage.total == round(8 * (after_delete - at(T0)) / 3600, 4)  # held until it is released
    st = status_after(st, usage)
    last = head_pod(uid="h1", phase="Failed", finished=grace_end, deleting=grace_end)
    usage = account(st, [], {"h1": last}, at(grace_end) + 1)
    assert not usage.holding and usage.folded == {"h1"}
    return status_after(st, usage)


def test_a_finished_jobs_hours_run_to_the_release_of_its_gpus_not_to_the_trainers_end_nor_a_kept_cluster():
    """issue 36: KubeRay deletes the RayCluster at the run's end (runPolicy.holdGpusAfterFinishSeconds
    0): the hours are the GPUs' allocation, from scheduling to the pod's release after the end."""
    released = _run_ended_and_cluster_deleted("2026-12-01T11:00:01Z", "2026-12-01T11:00:31Z")
    hours = released["progress"]["gpuHours"]
    assert hours == round(8 * (3600 + 31) / 3600, 4)  # to the release, 31 s after the end
    assert hours > 8 * (3600 - 12 * 60) / 3600  # more than the trainer's time (it started 10:12 after the download)
    assert not recorded_holding(released)
    # the cluster kept 600 s (holdGpusAfterFinishSeconds: 600, the old default): those idle minutes count, as they cost
    kept = _run_ended_and_cluster_deleted("2026-12-01T11:10:00Z", "2026-12-01T11:10:30Z")
    assert kept["progress"]["gpuHours"] == round(8 * (3600 + 630) / 3600, 4)
    assert abs(kept["progress"]["gpuHours"] - hours - 8 * 599 / 3600) < 1e-3  # 8 GPUs x ~10 idle minutes
