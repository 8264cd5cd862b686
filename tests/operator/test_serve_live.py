"""spec.serve wired into the operator, on the real API server and kube-controller-manager (its Job
controller, podFailurePolicy included), with the operator as a real process.

No kubelet runs here, so the test runs the load pod's program itself, as the pod would: the
command of the Job the operator made, the loader from its ConfigMap, the key from the Secret the
Job names, against the SGLang stand-in serving the real exporter's files; then writes the pod's
end the way the kubelet does. The real node runs the pod itself (tests/e2e/test_serve.py)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.request

import pytest
from kubernetes import client as k8s
from lorarl.serving import serve_job
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
    rayjob,
    seed_doc,
    start_sglang_standin,
    wait_for,
)

pytestmark = pytest.mark.controlplane

LOAD_JOB = f"{NAME}-serve"
SENTINEL = "sk-sentinel-21-serve-api-key"  # noqa: S105 - a test value, searched for


@pytest.fixture
def sglang(tmp_path, service_netns):
    procs = []

    def start(*args):
        # off loopback, which the load pod refuses (and spec.serve.url may not name): in a network
        # namespace of the harness, where the load pod's program runs too
        proc, url = start_sglang_standin(tmp_path, "--enable-lora", "--api-key", SENTINEL, *args, host=service_netns.ADDRESS, prefix=service_netns.prefix)
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        proc.terminate()
        proc.communicate(timeout=10)


def _succeed_and_export(control_plane, kube, namespace, tmp_path, serve: dict) -> None:
    k8s.CoreV1Api(kube.client).create_namespaced_secret(namespace, {"metadata": {"name": "sglang"}, "stringData": {"api-key": SENTINEL}})
    doc = seed_doc()
    doc["spec"]["export"] = {"destinations": [{"claim": {"claimName": "served"}}]}
    doc["spec"]["serve"] = {"apiKeySecretRef": {"name": "sglang", "key": "api-key"}, "claimMountPath": str(tmp_path / "mnt" / "0"), **serve}
    apply_job(control_plane, namespace, doc)
    wait_for(lambda: rayjob(kube, namespace, NAME), what="the RayJob")
    ray = FakeKubeRay(kube, namespace, NAME)
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running")
    ray.succeeded()
    # the real exporter's files land under tmp_path/mnt/0 (the claim "served", as the server mounts it)
    end_export_pod(kube, namespace, export_pod(kube, namespace), exporter_report(tmp_path), ok=True)


def _condition(kube, namespace, value: str):
    def check():
        st = (job(kube, namespace) or {}).get("status") or {}
        return st if conditions(st).get("AdapterServed", ("",))[0] == value else None

    return check


def _run_load_pod(kube, namespace, tmp_path, netns) -> tuple[int, str]:
    """The load pod's run: its Job's command and env, the loader from its ConfigMap, the Secret's
    key; in the namespace ``netns`` where the server is."""
    made = wait_for(lambda: kube.get("batch/v1", "Job", namespace, LOAD_JOB), what="the load Job")
    container = made["spec"]["template"]["spec"]["containers"][0]
    loader = tmp_path / "loader.py"
    for name, text in kube.get("v1", "ConfigMap", namespace, LOAD_JOB)["data"].items():  # loader.py and its egress.py
        (tmp_path / name).write_text(text)
    assert container["command"][:2] == ["python3", f"{serve_job.LOADER_DIR}/{serve_job.LOADER_FILE}"]
    env = {}
    for e in container["env"]:
        if "valueFrom" in e:
            ref = e["valueFrom"]["secretKeyRef"]
            secret = k8s.CoreV1Api(kube.client).read_namespaced_secret(ref["name"], namespace)
            env[e["name"]] = base64.b64decode(secret.data[ref["key"]]).decode()
        else:
            env[e["name"]] = e.get("value", "")
    log = tmp_path / "termination-log"
    argv = [*netns.prefix, sys.executable, "-I", str(loader), *container["command"][2:], "--termination-log", str(log)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, log.read_text()


def test_the_exported_adapter_is_loaded_into_the_server_and_status_says_where(control_plane, kube, namespace, operator, tmp_path, sglang, service_netns):
    url = sglang("--max-lora-rank", "8", "--lora-target-modules", "all")
    _succeed_and_export(control_plane, kube, namespace, tmp_path, {"url": url})
    st = wait_for(_condition(kube, namespace, "Unknown"), timeout=60, what="AdapterServed Unknown")
    c = conditions(st)
    assert c["AdapterExported"][0] == "True" and c["Reconciling"][0] == "True" and c["Stalled"][0] == "False"
    made = kube.get("batch/v1", "Job", namespace, LOAD_JOB)
    assert made["metadata"]["ownerReferences"][0]["uid"] == job(kube, namespace)["metadata"]["uid"]
    command = made["spec"]["template"]["spec"]["containers"][0]["command"]
    path = str(tmp_path / "mnt" / "0" / "ml" / "tiny-lora" / "rollout-0000099")  # the claim's directory as status.adapter names it
    assert command[command.index("--name") + 1] == NAME and command[command.index("--path") + 1] == path

    code, message = _run_load_pod(kube, namespace, tmp_path, service_netns)
    assert code == 0, message
    end_export_pod(kube, namespace, export_pod(kube, namespace, child="serve"), message, ok=True, container_name=serve_job.CONTAINER)
    st = wait_for(_condition(kube, namespace, "True"), timeout=60, what="AdapterServed True")
    c = conditions(st)
    assert c["AdapterServed"] == ("True", "Served") and c["Reconciling"][0] == "False" and c["Stalled"][0] == "False" and c["Ready"][0] == "True"
    assert {k: st["serving"][k] for k in ("server", "name", "path")} == {"server": url, "name": NAME, "path": path}
    wait_for(lambda: ("Normal", "AdapterServed") in events(kube, namespace), what="the AdapterServed event")

    def served() -> set[str]:
        req = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {SENTINEL}"})
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the harness's namespace
            return {c["id"] for c in json.loads(resp.read())["data"]}

    assert NAME in service_netns.call(served)

    # the sentinel: the key is in no object the operator wrote, no event, no log line
    written = [job(kube, namespace), kube.get("batch/v1", "Job", namespace, LOAD_JOB), kube.get("v1", "ConfigMap", namespace, LOAD_JOB)]
    texts = [json.dumps(o) for o in written] + [
        json.dumps(k8s.CoreV1Api(kube.client).list_namespaced_event(namespace).to_dict(), default=str),
        operator.output(),
    ]
    assert not [t for t in texts if SENTINEL in t]


def test_a_refused_load_fails_the_job_at_once_and_the_job_is_stalled(control_plane, kube, namespace, operator, tmp_path, sglang, service_netns):
    url = sglang("--max-lora-rank", "4", "--lora-target-modules", "all")  # the adapter's rank is 8
    _succeed_and_export(control_plane, kube, namespace, tmp_path, {"url": url, "backoffLimit": 3})
    wait_for(_condition(kube, namespace, "Unknown"), timeout=60, what="AdapterServed Unknown")
    code, message = _run_load_pod(kube, namespace, tmp_path, service_netns)
    assert code == 2, message
    end_export_pod(kube, namespace, export_pod(kube, namespace, child="serve"), message, ok=False, container_name=serve_job.CONTAINER, exit_code=code)
    st = wait_for(_condition(kube, namespace, "False"), timeout=60, what="AdapterServed False")
    c = conditions(st)
    assert c["AdapterServed"] == ("False", "LoadRefused") and c["Stalled"] == ("True", "AdapterServeFailed") and c["Ready"] == ("True", "Succeeded")
    said = next(x for x in st["conditions"] if x["type"] == "AdapterServed")["message"]
    assert "HTTP 400" in said and "incompatible" not in said  # a status and our sentence: no text of the server's (issue 35)
    # the real Job controller failed it on the first pod (podFailurePolicy), not after backoffLimit 3
    load = kube.get("batch/v1", "Job", namespace, LOAD_JOB)
    assert load["status"].get("failed") == 1 and any(x["type"] == "Failed" and x["reason"] == "PodFailurePolicy" for x in load["status"]["conditions"])
    assert "serving" not in st
