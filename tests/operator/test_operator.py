"""The operator end to end on a real kube-apiserver (+ controller manager), as a real process."""

from __future__ import annotations

import signal

import pytest
from kubernetes import client as k8s
from lorarl.admission.validation import parse_job
from lorarl.job import render

from tests.helpers import (
    CHILD_KINDS,
    NAME,
    apply_job,
    await_reconciles,
    conditions,
    events,
    job,
    phase_is,
    poke_and_await,
    rayjob,
    running,
    seed_doc,
    started,
    wait_for,
)

pytestmark = pytest.mark.controlplane


def test_seed_example_is_reconciled_into_children(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    st = wait_for(phase_is(kube, namespace, "Pending"), what="status Pending")
    stored = job(kube, namespace)
    rj = rayjob(kube, namespace)
    # the RayJob is exactly what `lorarl render` makes of the stored object
    expected = render.rayjob(parse_job(stored))
    assert rj["spec"] == {**expected["spec"], **{k: rj["spec"][k] for k in rj["spec"] if k not in expected["spec"]}}
    assert rj["spec"]["entrypoint"] == expected["spec"]["entrypoint"]
    assert rj["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "lorarl.dev/v1alpha1",
            "kind": "LoraRLJob",
            "name": NAME,
            "uid": stored["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    for api_version, kind, name in CHILD_KINDS:
        assert kube.get(api_version, kind, namespace, name) is not None, kind
    assert st["observedGeneration"] == stored["metadata"]["generation"]
    c = conditions(st)
    assert c["Ready"][0] == "False" and c["Reconciling"] == ("True", "RayJobCreated") and c["Stalled"][0] == "False"
    assert ("Normal", "Pending") in events(kube, namespace)
    # kubectl shows the printer columns
    out = control_plane.kubectl("get", "lorarljobs", "-n", namespace).stdout
    assert out.split("\n")[0].split() == ["NAME", "PHASE", "REASON", "ROLLOUT", "REWARD", "AGE"]
    assert "RayJobCreated" in out  # the REASON column: Ready's reason
    assert "Pending" in out
    wide = control_plane.kubectl("get", "lorarljobs", "-n", namespace, "-o", "wide").stdout
    assert "MI355X" in wide and "Qwen/Qwen3-4B" in wide


def test_success_sequence_and_kubectl_wait(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    ray = started(kube, namespace)
    ray.initializing()
    wait_for(phase_is(kube, namespace, "Preparing"), what="Preparing")
    ray.submitted()
    ray.running()
    st = wait_for(phase_is(kube, namespace, "Running"), what="Running")
    assert st["rayJob"]["rayClusterName"] == ray.cluster and st["rayJob"]["jobId"] == ray.job_id
    assert st["rayJob"]["dashboardURL"].endswith(":8265") and "startTime" in st
    ray.succeeded()
    waited = control_plane.kubectl("wait", "--for=condition=Succeeded", f"lorarljob/{NAME}", "-n", namespace, "--timeout=60s", check=False, timeout=90)
    assert waited.returncode == 0, waited.stderr
    st = job(kube, namespace)["status"]
    assert st["phase"] == "Succeeded" and "completionTime" in st
    c = conditions(st)
    assert c["Ready"] == ("True", "Succeeded") and c["Reconciling"][0] == "False" and c["Succeeded"] == ("True", "Succeeded")
    got = wait_for(lambda: (lambda e: e if ("Normal", "Succeeded") in e else None)(events(kube, namespace)), what="events")
    phases = [r for t, r in got if r in ("Pending", "Preparing", "Running", "Succeeded")]
    assert phases == ["Pending", "Preparing", "Running", "Succeeded"]


@pytest.mark.parametrize("failure,reason", [("app_failed", "AppFailed"), ("submission_failed", "SubmissionFailed"), ("deadline_exceeded", "DeadlineExceeded")])
def test_failure_sequences(control_plane, namespace, kube, operator, failure, reason):
    apply_job(control_plane, namespace, seed_doc())
    ray = started(kube, namespace)
    ray.initializing()
    if failure == "app_failed":
        ray.submitted()
        ray.running()
        wait_for(phase_is(kube, namespace, "Running"))
    getattr(ray, failure)()
    st = wait_for(phase_is(kube, namespace, "Failed"), what="Failed")
    c = conditions(st)
    assert c["Failed"] == ("True", reason) and c["Stalled"] == ("True", reason) and c["Ready"][0] == "False"
    assert st["rayJob"]["reason"] == reason
    wait_for(lambda: ("Warning", "Failed") in events(kube, namespace), what="Warning event")
    # kubectl wait on Failed works too, and Succeeded never comes
    assert control_plane.kubectl("wait", "--for=condition=Failed", f"lorarljob/{NAME}", "-n", namespace, "--timeout=30s").returncode == 0


def phase_events(kube, namespace):
    """Phase Events in the order they were first posted, with their counts: a repeated Event (the
    same transition again, e.g. Preparing -> Running after a retry) is one Event counted twice."""
    core = k8s.CoreV1Api(kube.client)
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={NAME},involvedObject.kind=LoraRLJob").items
    return [
        (e.reason, e.count)
        for e in sorted(items, key=lambda e: e.event_time)
        if e.reason in ("Pending", "Preparing", "Running", "Succeeded", "Failed", "Suspended")
    ]


def test_retrying_then_failed(control_plane, namespace, kube, operator):
    """KubeRay's retry (rayjob_controller.go v1.5.0: Running -> Retrying -> New "" -> Initializing):
    the job goes Running -> Preparing -> Running -> Failed, never back to Pending, one Event each."""
    doc = seed_doc()
    doc["spec"]["runPolicy"] = {"backoffLimit": 1}
    apply_job(control_plane, namespace, doc)
    ray = running(kube, namespace)
    assert rayjob(kube, namespace)["spec"]["backoffLimit"] == 1
    assert ray.app_failed()["jobDeploymentStatus"] == "Retrying"
    st = wait_for(
        lambda: (lambda s: s if conditions(s).get("Reconciling", ("", ""))[1] == "Retrying" else None)((job(kube, namespace) or {}).get("status") or {}),
        what="Retrying",
    )
    assert st["phase"] == "Preparing" and st["rayJob"]["failed"] == 1
    ray.new_attempt()
    st = wait_for(
        lambda: (lambda s: s if s.get("rayJob", {}).get("jobDeploymentStatus") is None and s.get("rayJob", {}).get("failed") == 1 else None)(
            job(kube, namespace)["status"]
        ),
        what="the operator to see New",
    )
    assert st["phase"] == "Preparing" and conditions(st)["Reconciling"] == ("True", "RayClusterRestarting")
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running again")
    ray.app_failed()
    st = wait_for(phase_is(kube, namespace, "Failed"))
    assert st["rayJob"]["failed"] == 2 and conditions(st)["Failed"] == ("True", "AppFailed")
    got = wait_for(lambda: (lambda p: p if ("Failed", 1) in p else None)(phase_events(kube, namespace)), what="the Failed Event")
    # Preparing -> Running twice: one Event, count 2
    assert got == [("Pending", 1), ("Preparing", 1), ("Running", 2), ("Preparing", 1), ("Failed", 1)]


def test_validation_failed(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    ray = started(kube, namespace)
    ray.validation_failed()
    st = wait_for(phase_is(kube, namespace, "Failed"))
    assert conditions(st)["Stalled"] == ("True", "ValidationFailed")


def test_suspend_and_resume(control_plane, namespace, kube, operator):
    """KubeRay's suspend and resume (v1.5.0: Running -> Suspending -> Suspended -> New "" ->
    Initializing): Running -> Suspended -> Preparing -> Running, one Event each."""
    apply_job(control_plane, namespace, seed_doc())
    ray = running(kube, namespace)
    control_plane.kubectl("patch", "lorarljob", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: rayjob(kube, namespace)["spec"]["suspend"] is True, what="RayJob suspended")
    ray.suspending()
    wait_for(lambda: conditions(job(kube, namespace)["status"]).get("Suspended") == ("True", "Suspending"), what="Suspending")
    ray.suspended()
    wait_for(lambda: conditions(job(kube, namespace)["status"]).get("Suspended") == ("True", "Suspended"), what="Suspended")
    st = job(kube, namespace)["status"]
    assert st["phase"] == "Suspended" and conditions(st)["Reconciling"][0] == "False"
    control_plane.kubectl("patch", "lorarljob", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_for(lambda: rayjob(kube, namespace)["spec"]["suspend"] is False, what="RayJob resumed")
    ray.resumed()
    st = wait_for(phase_is(kube, namespace, "Preparing"))
    assert conditions(st)["Suspended"][0] == "False" and conditions(st)["Reconciling"] == ("True", "RayClusterRestarting")
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running again")
    got = wait_for(lambda: (lambda p: p if ("Running", 2) in p else None)(phase_events(kube, namespace)), what="the second Running Event")
    # Preparing -> Running twice: one Event, count 2
    assert got == [("Pending", 1), ("Preparing", 1), ("Running", 2), ("Suspended", 1), ("Preparing", 1)]


def test_kueue_queue_is_left_to_kueue(control_plane, namespace, kube, operator):
    doc = seed_doc()
    doc["spec"]["scheduling"] = {"queueName": "rl-team"}
    apply_job(control_plane, namespace, doc)
    ray = started(kube, namespace)
    assert rayjob(kube, namespace)["spec"]["suspend"] is True
    # KubeRay v1.5.0 takes a RayJob created suspended through Initializing to Suspended
    ray.initializing()
    ray.suspending()
    ray.suspended()
    wait_for(phase_is(kube, namespace, "Pending"))
    wait_for(lambda: conditions(job(kube, namespace)["status"]).get("Suspended") == ("True", "Queued"), what="Queued")
    # Kueue admits: it flips suspend; the operator must not flip it back
    control_plane.kubectl("patch", "rayjob", NAME, "-n", namespace, "--type=merge", "--field-manager=kueue", "-p", '{"spec":{"suspend":false}}')
    ray.resumed()
    ray.initializing()
    wait_for(phase_is(kube, namespace, "Preparing"))
    control_plane.kubectl("annotate", "lorarljob", NAME, "-n", namespace, "poke=1")  # a spec-side change triggers a full apply
    wait_for(lambda: job(kube, namespace)["metadata"]["annotations"].get("poke"))
    # first observe the operator look again (two resyncs after the poke), then assert it left suspend alone
    await_reconciles(operator, namespace, "(resync): phase Preparing", 2)
    assert rayjob(kube, namespace)["spec"]["suspend"] is False


def test_deleted_rayjob_is_recreated(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    running(kube, namespace)
    old_uid = rayjob(kube, namespace)["metadata"]["uid"]
    kube.delete("ray.io/v1", "RayJob", namespace, NAME)
    wait_for(lambda: (rayjob(kube, namespace) or {}).get("metadata", {}).get("uid") not in (None, old_uid), what="a new RayJob")
    wait_for(lambda: ("Warning", "RayJobRecreated") in events(kube, namespace), what="RayJobRecreated event")
    assert "--resume" in rayjob(kube, namespace)["spec"]["entrypoint"]


def test_finished_job_is_not_rerun_when_its_rayjob_goes(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    ray = started(kube, namespace)
    ray.initializing()
    ray.succeeded()
    wait_for(phase_is(kube, namespace, "Succeeded"))
    kube.delete("ray.io/v1", "RayJob", namespace, NAME)
    wait_for(lambda: rayjob(kube, namespace) is None, what="RayJob gone")
    # first observe the operator look at the job after the RayJob is gone, then assert
    poke_and_await(kube, operator, namespace, "Succeeded", 1)
    assert rayjob(kube, namespace) is None and job(kube, namespace)["status"]["phase"] == "Succeeded"


def test_delete_job_garbage_collects_children(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    wait_for(lambda: rayjob(kube, namespace), what="RayJob")
    for api_version, kind, name in CHILD_KINDS:
        assert kube.get(api_version, kind, namespace, name) is not None
    assert not job(kube, namespace)["metadata"].get("finalizers")  # deletion never waits for the operator
    control_plane.kubectl("delete", "lorarljob", NAME, "-n", namespace, "--wait=true", "--timeout=60s")
    for api_version, kind, name in CHILD_KINDS:
        wait_for(lambda: kube.get(api_version, kind, namespace, name) is None, timeout=60, what=f"{kind} garbage-collected")  # noqa: B023 (called within this iteration)


def test_sigkill_mid_reconcile_leaves_exactly_one_rayjob_each(control_plane, namespace, kube, operator):
    names = [f"job-{i}" for i in range(6)]
    for n in names:
        doc = seed_doc()
        doc["metadata"]["name"] = n
        apply_job(control_plane, namespace, doc)
    # kill as soon as the first child exists: the other jobs are mid-reconcile or untouched
    wait_for(lambda: any(kube.get("v1", "ServiceAccount", namespace, f"{n}-reporter") for n in names), interval=0.02, what="first child")
    operator.kill(signal.SIGKILL)
    operator.start()
    for n in names:
        st = wait_for(phase_is(kube, namespace, "Pending", name=n), timeout=60, what=f"{n} converged")
        assert st["observedGeneration"] == job(kube, namespace, n)["metadata"]["generation"]
    rayjobs = kube.list("ray.io/v1", "RayJob", namespace)
    assert sorted(r["metadata"]["name"] for r in rayjobs) == names
    for r in rayjobs:
        assert len(r["metadata"]["ownerReferences"]) == 1


def test_status_writers_do_not_fight(control_plane, namespace, kube, operator):
    """The reporter's fields survive operator writes and vice versa (merge patches, disjoint keys)."""
    apply_job(control_plane, namespace, seed_doc())
    ray = started(kube, namespace)
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"progress": {"rollout": 7, "total": 100, "percent": 7}})
    ray.initializing()
    st = wait_for(phase_is(kube, namespace, "Preparing"))
    assert st["progress"] == {"rollout": 7, "total": 100, "percent": 7}


def test_unhealthy_training_flips_condition_and_suspends(control_plane, namespace, kube, operator):
    doc = seed_doc()
    doc["spec"]["health"] = {"stopOnUnhealthy": "Suspend"}
    apply_job(control_plane, namespace, doc)
    ray = started(kube, namespace)
    ray.initializing()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"))
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.012, "step": 3}})
    wait_for(lambda: conditions(job(kube, namespace)["status"]).get("TrainingHealthy") == ("True", "WithinThresholds"), what="healthy")
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.051, "step": 9}})
    wait_for(lambda: conditions(job(kube, namespace)["status"]).get("TrainingHealthy") == ("False", "LogprobDiffTooHigh"), what="unhealthy")
    wait_for(lambda: ("Warning", "LogprobDiffTooHigh") in events(kube, namespace), what="warning event")
    wait_for(lambda: rayjob(kube, namespace)["spec"]["suspend"] is True, what="suspended on unhealthy")


def test_unhealthy_training_stops_the_run(control_plane, namespace, kube, operator):
    doc = seed_doc()
    doc["spec"]["health"] = {"stopOnUnhealthy": "Stop", "maxLogprobAbsDiff": 0.02}
    apply_job(control_plane, namespace, doc)
    running(kube, namespace)
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"metrics": {"trainRolloutLogprobAbsDiffMean": 0.025, "step": 12}})
    st = wait_for(phase_is(kube, namespace, "Failed"), what="stopped as unhealthy")
    assert conditions(st)["Failed"] == ("True", "StoppedUnhealthy")
    wait_for(lambda: rayjob(kube, namespace) is None, timeout=60, what="the RayJob deleted")
    # the Events are posted after the status write: wait for them, do not read them once
    wait_for(lambda: {("Warning", "StoppingUnhealthy"), ("Warning", "Failed")} <= set(events(kube, namespace)), what="the Warning Events")
    # a stopped job is not re-created: observe a reconcile of it after the RayJob is gone first
    poke_and_await(kube, operator, namespace, "Failed", 13)
    assert rayjob(kube, namespace) is None and job(kube, namespace)["status"]["phase"] == "Failed"
