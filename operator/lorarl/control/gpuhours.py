"""Honest GPU-hours: GPUs x the time the job's pods held them, every pod of every attempt.

``progress.gpuHours`` (the reporter) counts the trainer's run time only. The pods hold their GPUs
longer: from the moment the scheduler binds them (the devices are counted against the node from
then on, while the init container downloads the model and data, while Ray starts) until their
containers have all terminated. So, per pod (pure; the pods as the API server returns them):

    hours(pod) = GPUs(pod) x (end - scheduled) / 3600
    scheduled  = lastTransitionTime of the PodScheduled condition with status True
    end        = the latest state.terminated.finishedAt of its containers once none still runs
                 (init containers included), else the pod's deletionTimestamp (the end of
                 its grace period) when it is being deleted, else now
    GPUs(pod)  = the pod's effective request of the GPU resource: max(largest init container,
                 sum of the app containers), as the scheduler computes a pod's request
                 (limits where requests are absent: extended resources need them equal)

A pod never scheduled holds nothing. The job's total is the sum over its pods; pods of earlier
attempts are gone from the API once their RayCluster is deleted, so a caller that watches pods
keeps each pod's last value by uid (``PodLedger``) and the total never decreases.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .jobmetrics import parse_time

GPU_RESOURCES = ("amd.com/gpu", "nvidia.com/gpu")


def _quantity(value: Any) -> int:
    try:
        return int(str(value))  # GPUs are whole devices: extended resources take integers only
    except ValueError:
        return 0


def _container_gpus(container: dict[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        if resource in (resources.get(kind) or {}):
            return _quantity(resources[kind][resource])
    return 0


def pod_gpus(pod: dict[str, Any], resources: Iterable[str] = GPU_RESOURCES) -> int:
    spec = pod.get("spec") or {}
    total = 0
    for resource in resources:
        app = sum(_container_gpus(c, resource) for c in spec.get("containers") or [])
        init = max((_container_gpus(c, resource) for c in spec.get("initContainers") or []), default=0)
        total += max(app, init)
    return total


def scheduled_at(pod: dict[str, Any]) -> float | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def released_at(pod: dict[str, Any], now: float) -> float:
    """When the pod gave its GPUs back (``now`` while it still holds them)."""
    st = pod.get("status") or {}
    app = st.get("containerStatuses") or []
    if st.get("phase") in ("Succeeded", "Failed") or (app and all((s.get("state") or {}).get("terminated") for s in app)):
        ends = [parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt")) for s in [*(st.get("initContainerStatuses") or []), *app]]
        ends = [t for t in ends if t is not None]
        if ends:
            return min(now, max(ends))
    # being deleted: deletionTimestamp is the deadline of its grace period (held until then at most)
    deleted = parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    return min(now, deleted) if deleted is not None else now


def pod_gpu_hours(pod: dict[str, Any], now: float) -> float:
    gpus, start = pod_gpus(pod), scheduled_at(pod)
    if not gpus or start is None:
        return 0.0
    return gpus * max(0.0, released_at(pod, now) - start) / 3600.0


class PodLedger:
    """Each pod's GPU-hours by uid, kept after the pod is gone: the job's total never decreases."""

    def __init__(self) -> None:
        self.hours: dict[str, float] = {}

    def observe(self, pods: Iterable[dict[str, Any]], now: float) -> float:
        for pod in pods:
            uid = (pod.get("metadata") or {}).get("uid")
            if uid:
                self.hours[uid] = max(self.hours.get(uid, 0.0), pod_gpu_hours(pod, now))
        return self.total()

    def total(self) -> float:
        return sum(self.hours.values())
