"""The operator with the real Kueue (v0.17.0, webhooks on) and the real KubeRay operator on a kwok
MI355X node: Kueue alone owns admission of a queued job once its RayJob exists.

The ClusterQueue holds 8 amd.com/gpu, exactly one seed job (1 node x 8 GPUs). Nothing runs in
kwok pods (the job's PVC has no provisioner, so the admitted RayJob stays Initializing): what is
tested is admission, preemption and suspension, which only Kueue, KubeRay and the API server
decide. The oracle is what they write: the Workload's conditions and spec.active, and every
value the RayJob's spec.suspend takes (recorded by a watch).
"""

from __future__ import annotations

import copy
import threading
import time

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import watch
from lorarl.control.queueing import DEACTIVATED_BY, JOB_UID_LABEL, WORKLOAD_API_VERSION
from lorarl.runtime.kube import Api
from lorarl_dev.pytest_plugin import call_failed

from tests.helpers import operator_api, seed_doc, wait_for
from tests.operator.conftest import OperatorProcess

pytestmark = pytest.mark.controlplane

LORARL = "lorarl.dev/v1alpha1"


@pytest.fixture
def kube(kueue_cluster):
    with operator_api(kueue_cluster) as api:
        yield api


@pytest.fixture
def operator(kueue_cluster, kueue_queue, tmp_path, request):
    op = OperatorProcess(kueue_cluster, kueue_queue.namespace, tmp_path).start()
    yield op
    op.stop()
    if call_failed(request.node):
        print(op.output()[-8000:])


class SuspendRecorder:
    """Every value each RayJob's spec.suspend takes, in order, from a watch opened before the
    RayJobs exist (a value that lasts a moment is still seen)."""

    def __init__(self, api_client, namespace: str):
        self.custom = k8s.CustomObjectsApi(api_client)
        self.values: dict[str, list[bool]] = {}
        self.stopped = False
        self.error: Exception | None = None
        listed = self.custom.list_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs")
        self.watch = watch.Watch()
        self.thread = threading.Thread(target=self._run, args=(namespace, listed["metadata"]["resourceVersion"]), daemon=True)
        self.thread.start()

    def _run(self, namespace: str, resource_version: str) -> None:
        try:
            for event in self.watch.stream(
                self.custom.list_namespaced_custom_object, "ray.io", "v1", namespace, "rayjobs", resource_version=resource_version, timeout_seconds=600
            ):
                if event["type"] == "DELETED":
                    continue
                obj = event["object"]
                seen = self.values.setdefault(obj["metadata"]["name"], [])
                value = bool((obj.get("spec") or {}).get("suspend"))
                if not seen or seen[-1] != value:
                    seen.append(value)
        except Exception as err:  # the connection closes under a stopped watch
            if not self.stopped:
                self.error = err

    def stop(self) -> dict[str, list[bool]]:
        self.stopped = True
        self.watch.stop()
        assert self.error is None, f"the RayJob watch broke: {self.error}"
        return {k: list(v) for k, v in self.values.items()}


def job_doc(name: str, namespace: str, queue: str, **spec) -> dict:
    doc = copy.deepcopy(seed_doc())
    doc["metadata"] = {"name": name, "namespace": namespace}
    doc["spec"]["scheduling"] = {"queueName": queue, **spec.pop("scheduling", {})}
    doc["spec"].update(spec)
    return doc


def apply(cp, doc: dict) -> None:
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def status(kube: Api, ns: str, name: str) -> dict:
    return (kube.get(LORARL, "LoraRLJob", ns, name) or {}).get("status") or {}


def condition(kube: Api, ns: str, name: str, type_: str) -> dict:
    return next((c for c in status(kube, ns, name).get("conditions", []) if c["type"] == type_), {})


def has(kube, ns, name, type_, status_, reason=None):
    def check():
        c = condition(kube, ns, name, type_)
        return c if c.get("status") == status_ and (reason is None or c.get("reason") == reason) else None

    return check


def rayjob(kube: Api, ns: str, name: str) -> dict:
    return kube.get("ray.io/v1", "RayJob", ns, name) or {}


def suspended(kube, ns, name, value: bool):
    # Kueue writes suspend: false by leaving it out (omitempty in KubeRay's RayJobSpec)
    return lambda: (bool((rayjob(kube, ns, name).get("spec") or {}).get("suspend")) is value) or None


def workload(kube: Api, ns: str, name: str) -> dict:
    uid = rayjob(kube, ns, name).get("metadata", {}).get("uid")
    if not uid:
        return {}
    items = kube.list(WORKLOAD_API_VERSION, "Workload", ns, f"{JOB_UID_LABEL}={uid}")
    return items[0] if items else {}


def workload_condition(kube, ns, name, type_) -> dict:
    return next((c for c in (workload(kube, ns, name).get("status") or {}).get("conditions", []) if c["type"] == type_), {})


def workload_admitted(kube, ns, name):
    """Kueue's own word (the Workload's Admitted condition), independent of the operator."""
    return lambda: workload_condition(kube, ns, name, "Admitted").get("status") == "True"


def workload_pending(kube, ns, name):
    return lambda: workload_condition(kube, ns, name, "QuotaReserved").get("status") == "False"


def events(kube: Api, ns: str, name: str) -> list[tuple[str, str]]:
    core = k8s.CoreV1Api(kube.client)
    items = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name},involvedObject.kind=LoraRLJob").items
    return [(e.type, e.reason) for e in items]


def test_quota_for_one_job_the_second_runs_when_the_first_finishes(kueue_cluster, kueue_queue, kube, operator):
    cp, ns, q = kueue_cluster, kueue_queue.namespace, kueue_queue
    # the first run ends at KubeRay's deadline (nothing runs in kwok pods): a real finish
    apply(cp, job_doc("first", ns, q.local_queue, runPolicy={"activeDeadlineSeconds": 60}))
    wait_for(workload_admitted(kube, ns, "first"), timeout=60, what="Kueue admits the first job")
    admitted = wait_for(has(kube, ns, "first", "Admitted", "True", "Admitted"), timeout=30, what="the first job reported admitted")
    assert f"ClusterQueue {q.cluster_queue}" in admitted["message"]
    apply(cp, job_doc("second", ns, q.local_queue))
    wait_for(workload_pending(kube, ns, "second"), timeout=60, what="Kueue keeps the second job pending")
    queued = wait_for(has(kube, ns, "second", "Reconciling", "True", "Queued"), timeout=30, what="the second job reported queued")
    assert f"ClusterQueue {q.cluster_queue} (LocalQueue {q.local_queue})" in queued["message"]
    # Kueue's own reason is passed on (no quota left for 8 more GPUs); the operator may have said
    # Queued before it saw the Workload's pending message, and then says it with that message
    queued = wait_for(
        lambda: (c := has(kube, ns, "second", "Reconciling", "True", "Queued")()) and "amd.com/gpu" in c["message"] and c,
        timeout=30,
        what="Kueue's reason in the second job's Queued message",
    )
    assert condition(kube, ns, "second", "Suspended")["reason"] == "Queued"
    wait_for(has(kube, ns, "second", "Admitted", "False", "Queued"), what="second: Admitted=False (Queued)")
    assert suspended(kube, ns, "second", True)()
    # the first finishes: Kueue marks its Workload Finished, frees the quota, admits the second
    wait_for(lambda: status(kube, ns, "first").get("phase") == "Failed", timeout=150, what="the first job's deadline")
    assert condition(kube, ns, "first", "Failed")["reason"] == "DeadlineExceeded"
    wait_for(lambda: workload_condition(kube, ns, "first", "Finished").get("status") == "True", timeout=30, what="the first Workload finished")
    wait_for(workload_admitted(kube, ns, "second"), timeout=60, what="Kueue admits the second job")
    wait_for(suspended(kube, ns, "second", False), what="Kueue unsuspends the second RayJob")
    wait_for(has(kube, ns, "second", "Admitted", "True", "Admitted"), timeout=30, what="the second job reported admitted")
    wait_for(lambda: status(kube, ns, "second").get("phase") == "Preparing", timeout=60, what="the second job preparing")
    assert ("Normal", "Admitted") in events(kube, ns, "second")


def test_a_higher_priority_job_preempts_and_the_preempted_one_resumes(kueue_cluster, kueue_queue, kube, operator):
    cp, ns, q = kueue_cluster, kueue_queue.namespace, kueue_queue
    apply(cp, job_doc("low", ns, q.local_queue, scheduling={"workloadPriorityClassName": "lorarl-low"}))
    wait_for(workload_admitted(kube, ns, "low"), timeout=60, what="Kueue admits the low-priority job")
    wait_for(suspended(kube, ns, "low", False), what="the low-priority RayJob started")
    assert workload(kube, ns, "low")["spec"]["priority"] == 100
    apply(cp, job_doc("high", ns, q.local_queue, scheduling={"workloadPriorityClassName": "lorarl-high"}))
    # Kueue evicts the low one (Workload Evicted=True, reason Preempted) and suspends its RayJob
    wait_for(lambda: workload_condition(kube, ns, "low", "Evicted").get("reason") == "Preempted", timeout=60, what="Kueue preempts the low-priority job")
    wait_for(suspended(kube, ns, "low", True), what="Kueue suspends the preempted RayJob")
    preempted = wait_for(has(kube, ns, "low", "Reconciling", "True", "Preempted"), timeout=60, what="the low-priority job preempted")
    evicted = workload_condition(kube, ns, "low", "Evicted")
    assert evicted["reason"] == "Preempted" and evicted["message"] in preempted["message"]
    assert "resumes from the newest checkpoint" in preempted["message"]
    assert condition(kube, ns, "low", "Suspended")["reason"] == "Preempted"
    assert condition(kube, ns, "low", "Admitted")["reason"] == "Preempted"
    wait_for(lambda: ("Warning", "Preempted") in events(kube, ns, "low"), what="the Preempted Warning")
    wait_for(workload_admitted(kube, ns, "high"), timeout=60, what="Kueue admits the high-priority job")
    # the high one goes: the low one is admitted again and KubeRay resumes it (a new Ray
    # cluster, the same entrypoint, which continues from the newest checkpoint)
    cp.kubectl("delete", "lorarljob", "high", "-n", ns)
    wait_for(workload_admitted(kube, ns, "low"), timeout=90, what="Kueue admits the low-priority job again")
    wait_for(suspended(kube, ns, "low", False), what="the preempted RayJob resumed")
    wait_for(has(kube, ns, "low", "Admitted", "True", "Admitted"), timeout=30, what="the low-priority job reported admitted again")
    assert "--resume" in rayjob(kube, ns, "low")["spec"]["entrypoint"]
    wait_for(lambda: status(kube, ns, "low").get("phase") == "Preparing", timeout=60, what="the resumed job preparing")


def test_health_gate_pauses_a_queued_job_through_its_workload(kueue_cluster, kueue_queue, kube, operator):
    cp, ns, q = kueue_cluster, kueue_queue.namespace, kueue_queue
    apply(cp, job_doc("guarded", ns, q.local_queue, health={"stopOnUnhealthy": "Suspend"}))
    wait_for(workload_admitted(kube, ns, "guarded"), timeout=60, what="Kueue admits it")
    wait_for(suspended(kube, ns, "guarded", False), what="started")
    kube.patch_status(LORARL, "LoraRLJob", ns, "guarded", {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.051, "step": 9}})
    # the operator deactivates the Workload; Kueue evicts it and suspends the RayJob itself
    wl = wait_for(
        lambda: (lambda w: w if (w.get("spec") or {}).get("active") is False else None)(workload(kube, ns, "guarded")),
        timeout=30,
        what="the Workload deactivated",
    )
    assert wl["metadata"]["annotations"][DEACTIVATED_BY] == "HealthSuspended"
    wait_for(lambda: workload_condition(kube, ns, "guarded", "Evicted").get("reason") == "Deactivated", timeout=30, what="Kueue evicts it")
    wait_for(suspended(kube, ns, "guarded", True), timeout=30, what="Kueue suspends the RayJob")
    wait_for(has(kube, ns, "guarded", "Suspended", "True", "HealthSuspended"), timeout=60, what="Suspended (HealthSuspended)")
    assert condition(kube, ns, "guarded", "Stalled")["reason"] == "LogprobDiffTooHigh"
    assert condition(kube, ns, "guarded", "Admitted")["reason"] == "HealthSuspended"
    assert status(kube, ns, "guarded")["phase"] == "Suspended"
    # healthy again: the operator re-activates the Workload it deactivated, Kueue re-admits it
    kube.patch_status(LORARL, "LoraRLJob", ns, "guarded", {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.01, "step": 10}})
    wait_for(workload_admitted(kube, ns, "guarded"), timeout=60, what="Kueue admits it again")
    wait_for(has(kube, ns, "guarded", "Admitted", "True"), timeout=30, what="reported admitted again")
    assert DEACTIVATED_BY not in (workload(kube, ns, "guarded")["metadata"].get("annotations") or {})
    wait_for(suspended(kube, ns, "guarded", False), what="resumed")


def test_spec_suspend_flips_once_per_decision_over_a_minute(kueue_cluster, kueue_queue, kube, operator):
    """Three decisions in the minute: Kueue admits A, the user suspends A (through A's
    Workload), Kueue admits B into the freed quota. Each is one change of spec.suspend."""
    cp, ns, q = kueue_cluster, kueue_queue.namespace, kueue_queue
    recorder = SuspendRecorder(kube.client, ns)
    start = time.monotonic()

    def reconciles(name: str) -> int:
        return operator.output().count(f"[{ns}/{name}] reconcile ")

    try:
        apply(cp, job_doc("a", ns, q.local_queue))
        wait_for(workload_admitted(kube, ns, "a"), timeout=60, what="Kueue admits A")
        apply(cp, job_doc("b", ns, q.local_queue))
        wait_for(workload_pending(kube, ns, "b"), timeout=60, what="Kueue keeps B pending")
        cp.kubectl("patch", "lorarljob", "a", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        # the operator acts on the suspend (its next reconciles of A), whatever it does
        mark = reconciles("a")
        wait_for(lambda: reconciles("a") >= mark + 3, timeout=30, what="the operator reconciles A after the suspend")
        # keep watching for the rest of the minute while the operator keeps reconciling both jobs
        # (resync every second); then see each reconciled twice more before the verdict
        wait_for(lambda: time.monotonic() - start >= 60, timeout=90, interval=1, what="a minute of watching")
        mark = {name: reconciles(name) for name in ("a", "b")}
        wait_for(lambda: all(reconciles(name) >= mark[name] + 2 for name in mark), timeout=30, what="two more reconciles of each job")
    finally:
        values = recorder.stop()
    flips = {name: len(seen) - 1 for name, seen in values.items()}
    assert values == {"a": [True, False, True], "b": [True, False]}, f"changes of spec.suspend per RayJob: {flips}: {values}"
    # and what the decisions were, as Kueue and the operator report them
    assert workload(kube, ns, "a")["metadata"]["annotations"][DEACTIVATED_BY] == "Suspended"
    assert workload_condition(kube, ns, "a", "Evicted")["reason"] == "Deactivated"
    assert condition(kube, ns, "a", "Suspended")["reason"] == "Suspended"
    assert workload_admitted(kube, ns, "b")() and condition(kube, ns, "b", "Admitted")["status"] == "True"
