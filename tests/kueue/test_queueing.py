"""Pure Kueue decisions and their status mapping (lorarl.control.queueing, lorarl.control.status)."""

from __future__ import annotations

from lorarl.control import status
from lorarl.control.health import Verdict
from lorarl.control.queueing import (
    CREATE_MANAGER,
    DEACTIVATED_BY,
    Admission,
    admission,
    find_workload,
    owns_suspend,
    suspend_handoff,
    suspend_reason,
    workload_patch,
)
from lorarl.runtime.kube import FIELD_MANAGER

from tests.helpers import job_from, with_spec

OK = Verdict("True", "WithinThresholds", "")
BAD = Verdict("False", "LogprobDiffTooHigh", "diff too high")
NOW = "2026-11-30T12:00:00Z"


def wl(active=None, mark=None, conditions=(), admission_cq=None, uid="rj-uid"):
    out = {"metadata": {"name": "rayjob-x-1a2b3", "ownerReferences": [{"uid": uid, "controller": True}]}, "spec": {}, "status": {}}
    if active is not None:
        out["spec"]["active"] = active
    if mark:
        out["metadata"]["annotations"] = {DEACTIVATED_BY: mark}
    out["status"]["conditions"] = [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    if admission_cq:
        out["status"]["admission"] = {"clusterQueue": admission_cq}
    return out


def test_suspend_reason():
    assert suspend_reason(job_from(with_spec()), BAD) is None
    assert suspend_reason(job_from(with_spec(suspend=True)), OK) == "Suspended"
    guarded = job_from(with_spec(health={"stopOnUnhealthy": "Suspend"}))
    assert suspend_reason(guarded, BAD) == "HealthSuspended" and suspend_reason(guarded, OK) is None


def test_workload_activation_follows_only_the_operators_own_decisions():
    assert workload_patch(None, "Suspended") is None  # no Workload yet: next reconcile
    assert workload_patch(wl(), "Suspended") == {"metadata": {"annotations": {DEACTIVATED_BY: "Suspended"}}, "spec": {"active": False}}
    assert workload_patch(wl(active=False, mark="Suspended"), "Suspended") is None  # done already
    assert workload_patch(wl(active=False, mark="Suspended"), "HealthSuspended")["metadata"]["annotations"][DEACTIVATED_BY] == "HealthSuspended"
    assert workload_patch(wl(active=False, mark="HealthSuspended"), None) == {"metadata": {"annotations": {DEACTIVATED_BY: None}}, "spec": {"active": True}}
    assert workload_patch(wl(active=False), None) is None  # deactivated by someone else: left alone
    assert workload_patch(wl(active=True), None) is None


def test_find_workload_by_controller_owner():
    assert find_workload([wl(uid="other"), wl()], {"metadata": {"uid": "rj-uid"}})["metadata"]["ownerReferences"][0]["uid"] == "rj-uid"
    assert find_workload([wl(uid="other")], {"metadata": {"uid": "rj-uid"}}) is None
    assert find_workload([wl()], None) is None


def test_owns_suspend_reads_managed_fields():
    def rj(manager, operation, fields):
        return {"metadata": {"managedFields": [{"manager": manager, "operation": operation, "fieldsV1": {"f:spec": fields}}]}}

    assert owns_suspend(rj(FIELD_MANAGER, "Apply", {"f:suspend": {}, "f:entrypoint": {}}))
    assert not owns_suspend(rj(FIELD_MANAGER, "Apply", {"f:entrypoint": {}}))
    assert not owns_suspend(rj(CREATE_MANAGER, "Apply", {"f:suspend": {}}))
    assert not owns_suspend(rj(FIELD_MANAGER, "Update", {"f:suspend": {}}))
    live = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x", "namespace": "n", "uid": "u"}, "spec": {"suspend": True, "entrypoint": "e"}}
    assert suspend_handoff(live) == {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x", "namespace": "n"}, "spec": {"suspend": True}}


def test_admission_digest():
    pending = admission(wl(conditions=[("QuotaReserved", "False", "Pending", "couldn't assign flavors: insufficient unused quota for amd.com/gpu")]), "team-cq")
    assert pending == Admission(
        workload="rayjob-x-1a2b3", cluster_queue="team-cq", pending_message="couldn't assign flavors: insufficient unused quota for amd.com/gpu"
    )
    admitted = admission(wl(conditions=[("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", "")], admission_cq="cq-a"), "team-cq")
    assert admitted.admitted and admitted.cluster_queue == "cq-a"
    preempted = admission(wl(conditions=[("Evicted", "True", "Preempted", "Preempted to accommodate a workload"), ("Preempted", "True", "InClusterQueue", "")]))
    assert (preempted.evicted_reason, preempted.preempted_reason) == ("Preempted", "InClusterQueue")
    assert admission(wl(active=False, mark="HealthSuspended")).deactivated_by == "HealthSuspended"
    assert admission(None, "cq") == Admission(cluster_queue="cq")


def rayjob(deployment, suspend=True):
    return {"metadata": {"name": "x"}, "spec": {"suspend": suspend}, "status": {"jobDeploymentStatus": deployment}}


def facts(**kw):
    base = dict(generation=1, now=NOW, user_suspended=False, queue_name="gpus", verdict=OK)
    base.update(kw)
    return status.Facts(**base)


def conds(out):
    return {c["type"]: (c["status"], c["reason"]) for c in out["conditions"]}


def cond(out, type_):
    return next(c for c in out["conditions"] if c["type"] == type_)


def test_queued_names_the_cluster_queue_and_kueues_reason():
    adm = Admission(workload="w", cluster_queue="team-cq", pending_message="insufficient unused quota for amd.com/gpu")
    out, events = status.compute({}, rayjob("Suspended"), facts(admission=adm))
    assert out["phase"] == "Pending"
    assert conds(out)["Reconciling"] == ("True", "Queued") and conds(out)["Suspended"] == ("True", "Queued")
    assert (
        cond(out, "Reconciling")["message"]
        == "waiting for Kueue to admit the job in ClusterQueue team-cq (LocalQueue gpus): insufficient unused quota for amd.com/gpu"
    )
    assert conds(out)["Admitted"] == ("False", "Queued")


def test_admitted_is_a_condition_and_an_event():
    previous, _ = status.compute({}, rayjob("Suspended"), facts(admission=Admission(workload="w", cluster_queue="cq")))
    out, events = status.compute(previous, rayjob("Initializing", suspend=False), facts(admission=Admission(workload="w", admitted=True, cluster_queue="cq")))
    assert out["phase"] == "Preparing"
    assert conds(out)["Admitted"] == ("True", "Admitted") and "ClusterQueue cq" in cond(out, "Admitted")["message"]
    assert status.Event("Normal", "Admitted", "Kueue admitted Workload w in ClusterQueue cq") in events
    # no second Event while it stays admitted
    _, again = status.compute(out, rayjob("Initializing", suspend=False), facts(admission=Admission(workload="w", admitted=True, cluster_queue="cq")))
    assert not [e for e in again if e.reason == "Admitted"]


def test_preempted_reports_kueues_reason_and_waits_to_resume():
    running, _ = status.compute({}, rayjob("Running", suspend=False), facts(admission=Admission(workload="w", admitted=True, cluster_queue="cq")))
    adm = Admission(
        workload="w",
        cluster_queue="cq",
        evicted_reason="Preempted",
        evicted_message="Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue",
        preempted_reason="InClusterQueue",
    )
    out, events = status.compute(running, rayjob("Suspending"), facts(admission=adm))
    assert out["phase"] == "Pending"
    assert conds(out)["Reconciling"] == ("True", "Preempted") and conds(out)["Suspended"] == ("True", "Preempted")
    assert conds(out)["Admitted"] == ("False", "Preempted") and conds(out)["Stalled"] == ("False", "NoError")
    assert cond(out, "Reconciling")["message"].startswith(
        "Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue; waiting for ClusterQueue cq"
    )
    assert [e for e in events if e.reason == "Preempted" and e.type == "Warning"]


def test_health_suspended_is_its_own_reason_for_queued_and_unqueued_jobs():
    adm = Admission(workload="w", cluster_queue="cq", active=False, deactivated_by="HealthSuspended", evicted_reason="Deactivated")
    out, _ = status.compute({}, rayjob("Suspended"), facts(admission=adm, verdict=BAD, health_suspended=True))
    assert out["phase"] == "Suspended"
    assert conds(out)["Suspended"] == ("True", "HealthSuspended") and conds(out)["Stalled"] == ("True", "LogprobDiffTooHigh")
    assert conds(out)["Admitted"] == ("False", "HealthSuspended")
    out, _ = status.compute({}, rayjob("Suspended"), facts(queue_name=None, verdict=BAD, health_suspended=True))
    assert conds(out)["Suspended"] == ("True", "HealthSuspended")


def test_user_suspend_of_a_queued_job_and_foreign_deactivation():
    adm = Admission(workload="w", cluster_queue="cq", active=False, deactivated_by="Suspended", evicted_reason="Deactivated")
    out, _ = status.compute({}, rayjob("Suspended"), facts(admission=adm, user_suspended=True))
    assert out["phase"] == "Suspended" and conds(out)["Ready"] == ("True", "Suspended")
    assert conds(out)["Admitted"] == ("False", "Suspended")
    foreign = Admission(workload="w", cluster_queue="cq", active=False, evicted_reason="Deactivated")
    out, _ = status.compute({}, rayjob("Suspended"), facts(admission=foreign))
    assert conds(out)["Stalled"] == ("True", "WorkloadDeactivated") and conds(out)["Reconciling"][0] == "False"


def test_without_a_queue_there_is_no_admitted_condition():
    out, _ = status.compute({}, rayjob("Running", suspend=False), facts(queue_name=None))
    assert "Admitted" not in conds(out)
