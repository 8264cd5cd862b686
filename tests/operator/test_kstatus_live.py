"""The operator's status in every phase, on the real API server, judged by the real kstatus
library (what Flux and cli-utils appliers run) and by `kubectl wait`; the objects are recorded
as the testdata of the Argo CD health check (hack/argocd/lorarl.dev/LoraRLJob/testdata).

LORARL_RECORD_TESTDATA=1 rewrites the recordings; otherwise the live objects must equal them.
"""

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.gitops.kstatus_tool import kstatus
from tests.helpers import NAME, REPO, apply_job, conditions, end_export_pod, export_pod, exporter_report, job, rayjob, seed_doc, wait_for
from tests.operator.kstatus_expected import EXPECTED

pytestmark = pytest.mark.controlplane

TESTDATA = REPO / "hack" / "argocd" / "lorarl.dev" / "LoraRLJob" / "testdata"
RECORD = os.environ.get("LORARL_RECORD_TESTDATA") == "1"
RECORDED_NAMESPACE = "ml-team"
RECORDED_TIME = "2026-11-30T10:00:00Z"


def status_of(kube, namespace):
    return (job(kube, namespace) or {}).get("status") or {}


def has(kube, namespace, type_, status_, reason=None):
    def check():
        st = status_of(kube, namespace)
        got = conditions(st).get(type_)
        return st if got and got[0] == status_ and (reason is None or got[1] == reason) else None

    return check


def fake_kuberay(kube, namespace):
    wait_for(lambda: rayjob(kube, namespace), what="the RayJob")
    ray = FakeKubeRay(kube, namespace, NAME)
    ray.cluster, ray.job_id = f"{NAME}-c7x2q", f"{NAME}-j4k9m"  # stable names for the recording
    return ray


def to_running(kube, namespace):
    ray = fake_kuberay(kube, namespace)
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(has(kube, namespace, "Ready", "True", "Training"), what="Running and Ready")
    return ray


def drive(state, control_plane, kube, namespace, request):
    """Bring one LoraRLJob to ``state`` the way users, KubeRay and Kueue do."""
    doc = seed_doc()
    if state == "new":  # no operator runs in this namespace: the object as applied
        apply_job(control_plane, namespace, doc)
        wait_for(lambda: job(kube, namespace), what="the LoraRLJob")
        return
    if state == "apply-failed":  # admission refuses the RayJob before the operator starts
        from tests.helpers import refuse_rayjobs

        refuse_rayjobs(control_plane, namespace, request)
    operator = request.getfixturevalue("operator")
    if state == "queued":
        doc["spec"]["scheduling"] = {"queueName": "rl-team"}
    if state == "running-unhealthy":
        doc["spec"]["health"] = {"stopOnUnhealthy": "Never"}
    if state == "invalid-spec":  # admitted by a newer CRD, but this operator cannot render it
        from tests.helpers import install_crd_with_accelerator

        install_crd_with_accelerator(request, "MI400X")
        doc["spec"]["hardware"]["accelerator"] = "MI400X"
    apply_job(control_plane, namespace, doc)

    if state == "pending":
        wait_for(has(kube, namespace, "Reconciling", "True", "RayJobCreated"), what="Pending")
    elif state == "queued":
        ray = fake_kuberay(kube, namespace)  # KubeRay takes the RayJob created suspended to Suspended
        ray.initializing()
        ray.suspending()
        ray.suspended()  # and Kueue keeps it suspended
        # Queued shows from the moment the RayJob is created suspended: wait for the last step mirrored
        wait_for(lambda: status_of(kube, namespace).get("rayJob", {}).get("jobDeploymentStatus") == "Suspended", what="Suspended mirrored")
        wait_for(has(kube, namespace, "Reconciling", "True", "Queued"), what="Queued")
    elif state == "preparing":
        fake_kuberay(kube, namespace).initializing()
        wait_for(has(kube, namespace, "Reconciling", "True", "RayClusterInitializing"), what="Preparing")
    elif state == "running":
        to_running(kube, namespace)
    elif state == "running-unhealthy":
        to_running(kube, namespace)
        kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"metrics": {"step": 9, "trainRolloutLogprobAbsDiffMean": 0.051}})
        wait_for(has(kube, namespace, "Stalled", "True", "LogprobDiffTooHigh"), what="unhealthy")
    elif state == "suspended":
        ray = to_running(kube, namespace)
        control_plane.kubectl("patch", "lorarljob", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        wait_for(lambda: rayjob(kube, namespace)["spec"]["suspend"] is True, what="RayJob suspended")
        ray.suspending()
        wait_for(has(kube, namespace, "Reconciling", "True", "Suspending"), what="Suspending")
        ray.suspended()
        wait_for(has(kube, namespace, "Ready", "True", "Suspended"), what="Suspended")
    elif state == "succeeded":
        to_running(kube, namespace).succeeded()
        wait_for(has(kube, namespace, "Succeeded", "True"), what="Succeeded")
    elif state in ("exporting", "exported", "export-failed"):
        control_plane.kubectl(
            "patch",
            "lorarljob",
            NAME,
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"export":{"backoffLimit":0,"destinations":[{"claim":{"claimName":"served"}}]}}}',
        )
        to_running(kube, namespace).succeeded()
        wait_for(has(kube, namespace, "AdapterExported", "Unknown", "Exporting"), what="Exporting")
        if state != "exporting":
            ok = state == "exported"
            end_export_pod(kube, namespace, export_pod(kube, namespace), exporter_report(request.getfixturevalue("tmp_path"), states=ok), ok=ok)
            wait_for(has(kube, namespace, "AdapterExported", "True" if ok else "False"), timeout=60, what=state)
    elif state == "failed":
        to_running(kube, namespace).app_failed()
        wait_for(has(kube, namespace, "Failed", "True", "AppFailed"), what="Failed")
    elif state == "invalid-spec":
        wait_for(has(kube, namespace, "Stalled", "True", "InvalidSpec"), what="InvalidSpec")
    elif state == "apply-failed":
        wait_for(has(kube, namespace, "Stalled", "True", "ApplyFailed"), what="ApplyFailed")
    elif state == "stale-generation":  # a spec change the (stopped) operator has not seen yet
        to_running(kube, namespace)
        operator.stop()
        control_plane.kubectl("patch", "lorarljob", NAME, "-n", namespace, "--type=merge", "-p", '{"spec":{"health":{"maxLogprobAbsDiff":0.05}}}')
        wait_for(lambda: job(kube, namespace)["metadata"]["generation"] == 2, what="generation 2")
    else:
        raise AssertionError(state)


def recorded_form(obj, namespace):
    """What the recording keeps: the object's identity, generation and status, with the test's
    namespace and the moments of the run replaced by fixed values."""
    kept = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": obj["metadata"]["name"], "namespace": namespace, "generation": obj["metadata"]["generation"]},
    }
    if "status" in obj:
        st = copy.deepcopy(obj["status"])
        for cond in st.get("conditions", []):
            cond["lastTransitionTime"] = RECORDED_TIME
        for key in ("startTime", "completionTime"):
            if key in st:
                st[key] = RECORDED_TIME
        kept["status"] = st
    text = json.dumps(kept).replace(namespace, RECORDED_NAMESPACE)
    return json.loads(text)


@pytest.mark.parametrize("state", list(EXPECTED))
def test_phase_as_kstatus_and_kubectl_see_it(state, control_plane, kube, namespace, request):
    drive(state, control_plane, kube, namespace, request)
    live = json.loads(control_plane.kubectl("get", "lorarljob", NAME, "-n", namespace, "-o", "json").stdout)
    want_kstatus, want_ready = EXPECTED[state]

    got = kstatus([live])[0]
    assert got["status"] == want_kstatus, (state, got, live.get("status"))

    waited = control_plane.kubectl("wait", "--for=condition=Ready", f"lorarljob/{NAME}", "-n", namespace, "--timeout=0s", check=False)
    assert (waited.returncode == 0) == want_ready, (state, waited.stdout, waited.stderr)

    path = TESTDATA / f"{state}.yaml"
    recorded = recorded_form(live, namespace)
    if RECORD:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(recorded, sort_keys=False, width=120))
    assert path.exists(), f"{path} missing: run with LORARL_RECORD_TESTDATA=1"
    assert yaml.safe_load(path.read_text()) == recorded, f"{path.name} differs from what the operator writes now (re-record with LORARL_RECORD_TESTDATA=1)"
