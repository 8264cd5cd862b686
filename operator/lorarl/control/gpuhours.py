"""Honest GPU-hours: GPUs x the time the job's pods held them, every pod of every attempt.

The pods hold their GPUs from the moment the scheduler binds them (the devices are counted
against the node from then on, while the init container downloads the model and data, while Ray
starts) until their containers have all terminated; the trainer runs only part of that. So, per
pod (pure; the pods as the API server returns them, or as ``pods.trim_pod`` keeps them):

    hours(pod) = GPUs(pod) x (end - scheduled) / 3600
    scheduled  = lastTransitionTime of the PodScheduled condition with status True
    end        = the latest state.terminated.finishedAt of its containers once none still runs
                 (init containers included), else the pod's deletionTimestamp (the end of
                 its grace period) when it is being deleted, else now
    GPUs(pod)  = the pod's effective request of the GPU resource: max(largest init container,
                 sum of the app containers), as the scheduler computes a pod's request
                 (limits where requests are absent: extended resources need them equal)

A pod never scheduled holds nothing. The job's total is the sum over its pods; pods of earlier
attempts are gone from the API once their RayCluster is deleted, so ``account`` keeps the
accounting in the job's status (``status.gpuAccounting``, operator-owned): the hours of pods that
are gone (``settledHours``) and each present pod's hours by uid. The total,
``status.progress.gpuHours`` = settledHours + the present pods' hours survives an operator restart
or a fail-over (the present pods are recomputed from their own timestamps) and is exact at every
pod transition: while a pod holds GPUs its hours only grow, and once its release is reported they
are its own timestamps' (a write in the seconds between the release and the kubelet's report of
it counted a little too much; the total then goes back by those seconds, never below the truth); between transitions it is written at most once per
``REFRESH_SECONDS`` (piggybacked on any other status write), so a running job costs no extra
write per report of the trainer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .times import unix_seconds as parse_time

GPU_RESOURCES = ("amd.com/gpu", "nvidia.com/gpu")
# status keys (api.types.GpuAccounting, GpuPod): operator-owned
ACCOUNTING, SETTLED_HOURS, PODS = "gpuAccounting", "settledHours", "pods"
POD_NAME, POD_UID, POD_GPUS, POD_HOURS, POD_HOLDING = "name", "uid", "gpus", "hours", "holding"
PROGRESS, GPU_HOURS = "progress", "gpuHours"  # status.progress.gpuHours: the one key of progress the operator writes
REFRESH_SECONDS = 60.0  # between pod transitions, the total is rewritten once a minute of its GPUs
MAX_PODS = 256  # pods recorded at once (the CRD's bound): a job has nodes (<= 64) GPU pods per attempt


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


def release_time(pod: dict[str, Any]) -> float | None:
    """When the pod gives (or gave) its GPUs back, if that is known: its containers' last
    termination once none runs, else the deadline of the grace period of a pod being deleted."""
    st = pod.get("status") or {}
    app = st.get("containerStatuses") or []
    if st.get("phase") in ("Succeeded", "Failed") or (app and all((s.get("state") or {}).get("terminated") for s in app)):
        finished = (parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt")) for s in [*(st.get("initContainerStatuses") or []), *app])
        ends = [t for t in finished if t is not None]
        if ends:
            return max(ends)
    # being deleted: deletionTimestamp is the deadline of its grace period (held until then at most)
    return parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))


def released_at(pod: dict[str, Any], now: float) -> float:
    """When the pod gave its GPUs back (``now`` while it still holds them)."""
    end = release_time(pod)
    return now if end is None else min(now, end)


def holding(pod: dict[str, Any], now: float) -> bool:
    """The pod holds GPUs now: scheduled with a GPU request, not yet released."""
    end = release_time(pod)
    return bool(pod_gpus(pod)) and scheduled_at(pod) is not None and (end is None or end > now)


def pod_gpu_hours(pod: dict[str, Any], now: float) -> float:
    gpus, start = pod_gpus(pod), scheduled_at(pod)
    if not gpus or start is None:
        return 0.0
    return gpus * max(0.0, released_at(pod, now) - start) / 3600.0


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0.0


def _hours(pod: dict[str, Any], record: dict[str, Any] | None, now: float) -> float:
    """A pod's hours given what was recorded of it: exact from its own timestamps once its
    release is known (the kubelet reports the end a few seconds late, so a write that fell in
    between counted those seconds too much: corrected here), else never less than recorded."""
    hours = pod_gpu_hours(pod, now)
    released = release_time(pod)
    if released is not None and released <= now:
        return hours
    return max(_number((record or {}).get(POD_HOURS)), hours)


@dataclass(frozen=True)
class Usage:
    """What ``account`` decided: the status fields, and whether they are worth a write of their own."""

    fields: dict[str, Any]  # {"progress": {"gpuHours": total}, "gpuAccounting": {...}}
    due: bool  # a pod began or stopped holding GPUs, one went, or REFRESH_SECONDS of GPUs accrued
    holding: bool  # some pod still holds GPUs (look again in REFRESH_SECONDS)
    folded: frozenset[str]  # uids of gone pods whose final hours went into settledHours

    @property
    def total(self) -> float:
        return float(self.fields[PROGRESS][GPU_HOURS])


def recorded_holding(job_status: dict[str, Any]) -> bool:
    """The stored accounting says a pod of the job still holds GPUs (a finished job is then not
    settled: its pods' release is still to be counted)."""
    pods = ((job_status.get(ACCOUNTING) or {}).get(PODS)) or []
    return any(isinstance(p, dict) and p.get(POD_HOLDING) for p in pods)


def account(
    previous: dict[str, Any], pods: Iterable[dict[str, Any]], gone: Mapping[str, dict[str, Any]], now: float, since: float | None = None
) -> Usage | None:
    """The job's GPU accounting from its stored status (``previous``), its pods present in the
    cache, and the last state of pods deleted since (``gone``, by uid); None while there is
    nothing to count. Pods created before ``since`` (the job's creation: a deleted job's pods
    under the same name) are not the job's."""
    before = previous.get(ACCOUNTING) or {}
    recorded = {p[POD_UID]: p for p in before.get(PODS) or [] if isinstance(p, dict) and isinstance(p.get(POD_UID), str)}
    settled = _number(before.get(SETTLED_HOURS))
    present: dict[str, dict[str, Any]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid")
        created = parse_time(meta.get("creationTimestamp"))
        if not uid or not pod_gpus(pod) or scheduled_at(pod) is None or (since is not None and created is not None and created < since):
            continue
        present[uid] = {
            POD_NAME: str(meta.get("name", ""))[:253],
            POD_UID: uid,
            POD_GPUS: pod_gpus(pod),
            POD_HOURS: round(_hours(pod, recorded.get(uid), now), 6),
            POD_HOLDING: holding(pod, now),
        }
    folded = set()
    for uid, record in recorded.items():
        if uid not in present:  # gone: its last state if the watch delivered it, else what was recorded
            last = gone.get(uid)
            settled += _hours(last, record, now) if last is not None else _number(record.get(POD_HOURS))
            folded.add(uid)
    for uid, last in gone.items():
        if uid not in recorded and uid not in present and pod_gpu_hours(last, now) > 0:
            settled += pod_gpu_hours(last, now)  # came and went between two looks
            folded.add(uid)
    if not present and not recorded and not folded and not before:
        return None
    kept = sorted(present.values(), key=lambda p: (not p[POD_HOLDING], p[POD_NAME]))[:MAX_PODS]
    for extra in sorted(present.values(), key=lambda p: (not p[POD_HOLDING], p[POD_NAME]))[MAX_PODS:]:
        settled += extra[POD_HOURS]  # beyond the bound: counted, no longer itemised
    total = round(settled + sum(p[POD_HOURS] for p in kept), 4)
    accrued = {uid: p[POD_HOURS] - _number((recorded.get(uid) or {}).get(POD_HOURS)) for uid, p in present.items()}
    due = (
        bool(folded)
        or set(present) != set(recorded)
        or any(bool(recorded[uid].get(POD_HOLDING)) != p[POD_HOLDING] for uid, p in present.items())
        or any(accrued[uid] * 3600.0 + 1.0 >= p[POD_GPUS] * REFRESH_SECONDS for uid, p in present.items() if p[POD_HOLDING])  # 1 s: rounding
        or (previous.get(PROGRESS) or {}).get(GPU_HOURS) != total
        and not recorded  # first look (or an older reporter's value)
    )
    fields = {PROGRESS: {GPU_HOURS: total}, ACCOUNTING: {SETTLED_HOURS: round(settled, 6), PODS: kept}}
    return Usage(fields=fields, due=due, holding=any(p[POD_HOLDING] for p in kept), folded=frozenset(folded))
