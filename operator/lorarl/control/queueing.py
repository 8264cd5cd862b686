"""Kueue admission, decided purely: who writes the RayJob's spec.suspend, when the operator
deactivates the job's Workload, and what the Workload says about the job.

With ``spec.scheduling.queueName`` Kueue alone owns admission once the RayJob exists:

* the RayJob is created suspended, by the field manager :data:`CREATE_MANAGER` (one request, so
  it never exists unsuspended); every later apply by the operator's own manager leaves
  ``spec.suspend`` out, so the operator never writes it again (server-side apply keeps a field
  that another manager still owns when it is dropped from an applied config; Kueue's update on
  admission takes ``spec.suspend`` over from the creating manager);
* a suspend asked by the user (``spec.suspend``) or by the health gate (``stopOnUnhealthy:
  Suspend``) deactivates the Workload (``spec.active: false``); Kueue then evicts it and
  suspends the RayJob itself, and re-queues it when the operator re-activates it. The operator
  only re-activates a Workload it deactivated (marked with :data:`DEACTIVATED_BY`); one
  deactivated by someone else is left alone and reported.

Kueue facts (sigs.k8s.io/kueue v0.17.0): the Workload of a job is controlled by it and labelled
``kueue.x-k8s.io/job-uid: <job uid>`` (pkg/controller/jobframework/reconciler.go:1375-1391,
pkg/controller/constants/constants.go:32-34); ``spec.active: false`` evicts it with reason
``Deactivated`` and suspends the job (apis/kueue/v1beta2/workload_types.go:955,1042-1044).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ..api import types as api
from ..reporter.text import printable
from ..runtime.kube import FIELD_MANAGER
from . import health

WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: Field manager of the one apply that creates a queued RayJob (and so owns its initial
#: ``spec.suspend: true`` until Kueue admits it).
CREATE_MANAGER = "lorarl-operator-create"
#: Annotation on a Workload the operator deactivated, with why (``Suspended`` or ``HealthSuspended``).
DEACTIVATED_BY = "lorarl.dev/deactivated"

USER_SUSPENDED, HEALTH_SUSPENDED = "Suspended", "HealthSuspended"


def queued(job: api.LoraRLJob) -> bool:
    return bool(job.spec.scheduling.queue_name)


def suspend_reason(job: api.LoraRLJob, verdict: health.Verdict) -> str | None:
    """Why the run should be suspended (None: it should run)."""
    if job.spec.suspend:
        return USER_SUSPENDED
    if job.spec.health.stop_on_unhealthy == "Suspend" and verdict.status == "False":
        return HEALTH_SUSPENDED
    return None


def rayjob_apply(rendered: dict[str, Any], job: api.LoraRLJob, live: dict[str, Any] | None, verdict: health.Verdict) -> tuple[dict[str, Any], str]:
    """The RayJob to apply and the field manager to apply it with.

    Without a queue the operator owns ``spec.suspend`` (user or health suspend). With a queue:
    created suspended by :data:`CREATE_MANAGER`; afterwards ``spec.suspend`` is left out."""
    obj = copy.deepcopy(rendered)
    if not queued(job):
        obj["spec"]["suspend"] = suspend_reason(job, verdict) is not None
        return obj, FIELD_MANAGER
    if live is None:
        obj["spec"]["suspend"] = True
        return obj, CREATE_MANAGER
    obj["spec"].pop("suspend", None)
    return obj, FIELD_MANAGER


def owns_suspend(live: dict[str, Any] | None, manager: str = FIELD_MANAGER) -> bool:
    """True when ``manager`` (by server-side apply) owns the RayJob's spec.suspend: a queued
    RayJob created by an older operator, which must hand the field over before dropping it (a
    field dropped by its only owner is removed, i.e. the RayJob would start unadmitted)."""
    for entry in ((live or {}).get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            if "f:suspend" in ((entry.get("fieldsV1") or {}).get("f:spec") or {}):
                return True
    return False


def suspend_handoff(live: dict[str, Any]) -> dict[str, Any]:
    """The apply (by :data:`CREATE_MANAGER`, without force) that co-owns the live spec.suspend so
    that the operator's manager can drop it. A conflict means Kueue changed it meanwhile, and so
    already took it over."""
    meta = live["metadata"]
    return {
        "apiVersion": live["apiVersion"],
        "kind": live["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": {"suspend": bool((live.get("spec") or {}).get("suspend"))},
    }


def find_workload(workloads: list[dict[str, Any]], rayjob: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Workload Kueue made for ``rayjob``: the one it controls (owner reference by uid)."""
    if rayjob is None:
        return None
    uid = rayjob["metadata"].get("uid")
    for wl in workloads:
        for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("uid") == uid and ref.get("controller"):
                return wl
    return None


def workload_patch(workload: dict[str, Any] | None, reason: str | None) -> dict[str, Any] | None:
    """The merge patch that makes the Workload's activation follow the operator's decision, or
    None when nothing is to change. Deactivate (and mark why) when ``reason`` is set; re-activate
    only a Workload the operator deactivated."""
    if workload is None:
        return None
    active = (workload.get("spec") or {}).get("active", True) is not False
    mark = ((workload.get("metadata") or {}).get("annotations") or {}).get(DEACTIVATED_BY)
    if reason is not None:
        if active or mark != reason:
            return {"metadata": {"annotations": {DEACTIVATED_BY: reason}}, "spec": {"active": False}}
        return None
    if mark is not None:
        return {"metadata": {"annotations": {DEACTIVATED_BY: None}}, "spec": {"active": True}}
    return None


@dataclass(frozen=True)
class Admission:
    """What Kueue says about a queued job, from its Workload (apis/kueue/v1beta2/workload_types.go)."""

    workload: str | None = None  # its name; None: Kueue has not created it (yet)
    admitted: bool = False
    cluster_queue: str | None = None  # where it is admitted (status.admission.clusterQueue)
    active: bool = True
    deactivated_by: str | None = None  # the operator's mark: Suspended | HealthSuspended
    pending_message: str = ""  # why it is not admitted (QuotaReserved=False)
    evicted_reason: str | None = None  # Evicted=True: Preempted, Deactivated, ...
    evicted_message: str = ""
    preempted_reason: str | None = None  # Preempted=True: InClusterQueue, InCohortReclamation, ...
    finished: bool = False


def _conditions(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}


def admission(workload: dict[str, Any] | None, cluster_queue: str | None = None) -> Admission:
    """Digest a Workload. ``cluster_queue`` is the LocalQueue's ClusterQueue (a pending
    Workload does not name it)."""
    if workload is None:
        return Admission(cluster_queue=cluster_queue)
    conds = _conditions(workload)

    def true(type_: str) -> dict[str, Any] | None:
        c = conds.get(type_)
        return c if c and c.get("status") == "True" else None

    st = workload.get("status") or {}
    evicted, preempted = true("Evicted"), true("Preempted")
    reserved = conds.get("QuotaReserved") or {}
    return Admission(
        workload=workload["metadata"]["name"],
        admitted=bool(true("Admitted")),
        cluster_queue=(st.get("admission") or {}).get("clusterQueue") or cluster_queue,
        active=(workload.get("spec") or {}).get("active", True) is not False,
        deactivated_by=((workload.get("metadata") or {}).get("annotations") or {}).get(DEACTIVATED_BY),
        pending_message=printable(reserved.get("message", "")) if reserved.get("status") == "False" else "",
        evicted_reason=evicted.get("reason") if evicted else None,
        evicted_message=printable(evicted.get("message", "")) if evicted else "",
        preempted_reason=preempted.get("reason") if preempted else None,
        finished=bool(true("Finished")),
    )
