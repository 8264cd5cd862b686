"""The export wired into the operator, on the real API server and kube-controller-manager (its Job
controller and garbage collector), with the operator as a real process.

No kubelet runs here: the export Job's pod, created by the real Job controller, is reported ended
the way the kubelet reports it (pods/status: phase and the container's terminated state), with
the termination message the real exporter writes for a real save (``lorarl.adapter.export``);
the real Job controller then marks the Job Complete or Failed. The real node runs the pod itself
(tests/e2e/test_export.py)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client as k8s
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.helpers import (
    NAME,
    apply_job,
    conditions,
    end_export_pod,
    events,
    export_pod,
    exporter_report,
    job,
    phase_is,
    poke_and_await,
    rayjob,
    seed_doc,
    wait_for,
)

pytestmark = pytest.mark.controlplane

SENTINEL_KEY, SENTINEL_SECRET = "AKIDSENTINEL21EXPORT", "sentinel-21-export-secret-value"  # noqa: S105 - a test value, searched for


def _export_spec(backoff_limit: int = 0) -> dict:
    return {
        "destinations": [
            {"s3": {"bucket": "adapters", "endpoint": "http://moto.invalid:9000", "credentialsSecretName": "adapters-rw"}},
            {"claim": {"claimName": "served-adapters", "path": "team/"}},
        ],
        "backoffLimit": backoff_limit,
    }


def _secret(kube, namespace: str) -> None:
    k8s.CoreV1Api(kube.client).create_namespaced_secret(
        namespace, {"metadata": {"name": "adapters-rw"}, "stringData": {"AWS_ACCESS_KEY_ID": SENTINEL_KEY, "AWS_SECRET_ACCESS_KEY": SENTINEL_SECRET}}
    )


def _run(control_plane, kube, namespace, name: str, **spec) -> FakeKubeRay:
    doc = seed_doc()
    doc["metadata"]["name"] = name
    doc["spec"].update(spec)
    apply_job(control_plane, namespace, doc)
    wait_for(lambda: rayjob(kube, namespace, name), what=f"the RayJob of {name}")
    ray = FakeKubeRay(kube, namespace, name)
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running", name), what=f"{name} Running")
    return ray


def _export_job(kube, namespace, name=NAME):
    return kube.get("batch/v1", "Job", namespace, f"{name}-export")


def _adapter_exported(kube, namespace, value: str, name=NAME):
    def check():
        st = (job(kube, namespace, name) or {}).get("status") or {}
        return st if conditions(st).get("AdapterExported", ("",))[0] == value else None

    return check


def test_the_export_job_is_created_after_success_once_and_its_report_becomes_status_adapter(control_plane, kube, namespace, operator, tmp_path):
    _secret(kube, namespace)
    ray = _run(control_plane, kube, namespace, NAME, export=_export_spec())
    # Running was written by a reconcile that saw spec.export: no export before the run succeeded
    assert _export_job(kube, namespace) is None and "AdapterExported" not in conditions(job(kube, namespace)["status"])

    ray.succeeded()
    st = wait_for(_adapter_exported(kube, namespace, "Unknown"), what="AdapterExported Unknown")
    c = conditions(st)
    assert st["phase"] == "Succeeded" and c["Ready"] == ("True", "Succeeded") and c["Reconciling"][0] == "True" and c["Stalled"][0] == "False"
    made = _export_job(kube, namespace)
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("LoraRLJob", job(kube, namespace)["metadata"]["uid"], True)
    assert kube.get("v1", "ConfigMap", namespace, f"{NAME}-export")["metadata"]["ownerReferences"][0]["uid"] == owner["uid"]
    # credentials only by reference
    env = made["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in env if "valueFrom" in e} == {"adapters-rw"}

    end_export_pod(kube, namespace, export_pod(kube, namespace), exporter_report(tmp_path), ok=True)
    st = wait_for(_adapter_exported(kube, namespace, "True"), timeout=60, what="AdapterExported True")
    c = conditions(st)
    assert c["AdapterExported"] == ("True", "Exported") and c["Reconciling"][0] == "False" and c["Stalled"][0] == "False" and c["Ready"][0] == "True"
    adapter = st["adapter"]
    assert adapter["digest"].startswith("sha256:") and adapter["rollout"] == 99 and adapter["size"] > 0 and adapter["format"] == "peft-safetensors"
    wait_for(lambda: ("Normal", "AdapterExported") in events(kube, namespace), what="the AdapterExported event")
    wait_for(lambda: (_export_job(kube, namespace) or {}).get("status", {}).get("succeeded") == 1, what="the Job controller's Complete")

    # once: the export Job deleted by hand is not made again, whatever brings the job back
    uid = made["metadata"]["uid"]
    kube.delete("batch/v1", "Job", namespace, f"{NAME}-export")
    wait_for(lambda: (_export_job(kube, namespace) or {}).get("metadata", {}).get("uid") != uid, what="the export Job gone")
    poke_and_await(kube, operator, namespace, "Succeeded", 100)
    assert _export_job(kube, namespace) is None
    assert conditions(job(kube, namespace)["status"])["AdapterExported"] == ("True", "Exported")

    # the sentinel: the Secret's values are in no object the operator wrote, no event, no log line
    written = [job(kube, namespace), made, kube.get("v1", "ConfigMap", namespace, f"{NAME}-export"), rayjob(kube, namespace)]
    texts = [json.dumps(o) for o in written] + [
        json.dumps(k8s.CoreV1Api(kube.client).list_namespaced_event(namespace).to_dict(), default=str),
        operator.output(),
    ]
    assert not [t for t in texts if SENTINEL_KEY in t or SENTINEL_SECRET in t]


def test_a_refused_export_is_false_and_stalled_and_the_run_stays_succeeded(control_plane, kube, namespace, operator, tmp_path):
    ray = _run(control_plane, kube, namespace, NAME, export=_export_spec(backoff_limit=0))
    ray.succeeded()
    wait_for(_adapter_exported(kube, namespace, "Unknown"), what="AdapterExported Unknown")
    end_export_pod(kube, namespace, export_pod(kube, namespace), exporter_report(tmp_path, states=False), ok=False)  # a save whose training states are missing
    st = wait_for(_adapter_exported(kube, namespace, "False"), timeout=60, what="AdapterExported False")
    c = conditions(st)
    assert st["phase"] == "Succeeded" and c["Succeeded"][0] == "True" and c["Ready"] == ("True", "Succeeded")
    assert c["AdapterExported"] == ("False", "SaveIncomplete") and c["Stalled"] == ("True", "AdapterExportFailed") and c["Reconciling"][0] == "False"
    assert "adapter" not in st
    wait_for(lambda: ("Warning", "AdapterExportFailed") in events(kube, namespace), what="the AdapterExportFailed event")
    assert ((_export_job(kube, namespace) or {}).get("status") or {}).get("failed") == 1  # the real Job controller gave up (backoffLimit 0)


def test_a_failed_run_exports_nothing(control_plane, kube, namespace, operator):
    ray = _run(control_plane, kube, namespace, NAME, export=_export_spec())
    ray.app_failed()
    wait_for(phase_is(kube, namespace, "Failed"), what="Failed")
    poke_and_await(kube, operator, namespace, "Failed", 7)
    assert _export_job(kube, namespace) is None and "AdapterExported" not in conditions(job(kube, namespace)["status"])


def test_the_ttl_deletion_waits_for_the_export(control_plane, kube, namespace, operator, tmp_path):
    ray = _run(control_plane, kube, namespace, NAME, export=_export_spec(), ttlSecondsAfterFinished=0)
    ray.succeeded()
    wait_for(_adapter_exported(kube, namespace, "Unknown"), what="AdapterExported Unknown")
    # a reconcile after the TTL ran out, while the export runs: the job stays
    poke_and_await(kube, operator, namespace, "Succeeded", 3)
    assert job(kube, namespace) is not None
    end_export_pod(kube, namespace, export_pod(kube, namespace), exporter_report(tmp_path), ok=True)
    wait_for(lambda: job(kube, namespace) is None, timeout=60, what="the job deleted once its export ended")
