"""No secret value leaks: the W&B and Hugging Face Secrets hold sentinel values; a job references
them; the operator (a real process with the chart's RBAC), the KubeRay stand-in and the shipped
reporter (with the Secret values in its environment, as the head container has them) run it to
Succeeded. Then no sentinel, nor its base64 form, appears in any object in the namespace but the
Secrets themselves, in the job's status, in an Event, in the operator's log, in the reporter's
output, or in the API server's audit log."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys

import pytest
import yaml
from lorarl.job import render
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.chart.helm import operator_rbac
from tests.helpers import NAME, apply_job, job, phase_is, rayjob, reporter_env, seed_doc, shipped_reporter, wait_for
from tests.operator.conftest import OperatorProcess
from tests.reporter.reporter_testlib import CHILD, generate_miles_log

pytestmark = pytest.mark.controlplane

# every namespaced kind the operator writes or that records what happened
SCANNED_KINDS = (
    "serviceaccounts",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "configmaps",
    "persistentvolumeclaims",
    "networkpolicies.networking.k8s.io",
    "rayjobs.ray.io",
    "lorarljobs.lorarl.dev",
    "events",
    "events.events.k8s.io",
)


def forms(value: str) -> list[str]:
    """The sentinel as text and as the base64 a ConfigMap's binaryData or a Secret would carry."""
    return [value, base64.b64encode(value.encode()).decode().rstrip("=")]


def leaks(text: str, sentinels: dict[str, str]) -> list[str]:
    return [f"{name} ({form[:6]}...)" for name, value in sentinels.items() for form in forms(value) if form in text]


def test_no_sentinel_leaves_its_secret(helm, control_plane, namespace, kube, tmp_path):
    sentinels = {"wandb": "WANDBSENTINEL" + secrets.token_hex(16), "hf": "hf_SENTINEL" + secrets.token_hex(16)}
    control_plane.kubectl("create", "secret", "generic", "wandb", "-n", namespace, f"--from-literal=api-key={sentinels['wandb']}")
    control_plane.kubectl("create", "secret", "generic", "hf", "-n", namespace, f"--from-literal=token={sentinels['hf']}")

    rbac = operator_rbac(helm, namespace, release=namespace, watch_namespaces=[namespace])
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    sa_name = next(d for d in rbac if d["kind"] == "ServiceAccount")["metadata"]["name"]
    operator = OperatorProcess(control_plane, namespace, tmp_path, kubeconfig=control_plane.restricted_kubeconfig(namespace, sa_name)).start()
    try:
        doc = seed_doc()
        doc["spec"]["tracking"] = {"wandb": {"apiKeySecretRef": {"name": "wandb", "key": "api-key"}}}
        doc["spec"].setdefault("dataPrep", {})["hfTokenSecretRef"] = {"name": "hf", "key": "token"}
        apply_job(control_plane, namespace, doc)
        wait_for(lambda: rayjob(kube, namespace), timeout=60, what="the RayJob")
        # the head container gets both as secretKeyRef env, never as values
        head = rayjob(kube, namespace)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for c in head["containers"] + head["initContainers"]
            for e in c.get("env", [])  # the reporter sidecar has none
            if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]
        }
        assert refs == {"WANDB_API_KEY": {"name": "wandb", "key": "api-key"}, "HF_TOKEN": {"name": "hf", "key": "token"}}

        ray = FakeKubeRay(kube, namespace, NAME)
        ray.initializing()
        ray.submitted()
        ray.running()
        wait_for(phase_is(kube, namespace, "Running"), what="Running")

        # the reporter as the head runs it: the per-job token, the Secret values in its environment
        token = tmp_path / "token"
        token.write_text(control_plane.service_account_token(namespace, render.reporter_account_name(job_from_cluster(kube, namespace))))
        log = generate_miles_log(num_rollouts=20, save_dir=f"/root/shared_data/{NAME}/checkpoints")
        log_file = tmp_path / "miles.log"
        log_file.write_bytes(log.data)
        env = {**reporter_env(control_plane, token), "WANDB_API_KEY": sentinels["wandb"], "HF_TOKEN": sentinels["hf"]}
        reporter = subprocess.run(
            [
                *shipped_reporter(tmp_path),
                "--namespace",
                namespace,
                "--name",
                NAME,
                "--total-rollouts",
                "20",
                "--interval",
                "0.2",
                "--",
                sys.executable,
                "-c",
                CHILD,
                str(log_file),
                "0",
            ],
            capture_output=True,
            env=env,
            timeout=300,
        )
        assert reporter.returncode == 0, reporter.stderr.decode()[-2000:]
        wait_for(lambda: (job(kube, namespace).get("status") or {}).get("progress", {}).get("rollout") == 20, what="the reporter's progress")
        ray.succeeded()
        wait_for(phase_is(kube, namespace, "Succeeded"), what="Succeeded")
        wait_for(lambda: "Succeeded" in operator.output(), what="the operator to log the transition")
    finally:
        operator.stop()
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all([d for d in rbac if d["kind"].startswith("Cluster")]))

    scanned = {}
    for kind in SCANNED_KINDS:
        items = json.loads(control_plane.kubectl("get", kind, "-n", namespace, "-o", "json").stdout)["items"]
        assert items or kind.startswith("events"), f"no {kind}: the scan would prove nothing"
        scanned[kind] = json.dumps(items)
    assert '"Succeeded"' in scanned["lorarljobs.lorarl.dev"] and "rollout" in scanned["lorarljobs.lorarl.dev"]
    scanned["operator log"] = operator.output()
    scanned["reporter stdout"] = reporter.stdout.decode(errors="replace")
    scanned["reporter stderr"] = reporter.stderr.decode(errors="replace")
    scanned["audit log"] = control_plane.audit_log_path.read_text(errors="replace")
    assert namespace in scanned["audit log"]
    found = {where: leaks(text, sentinels) for where, text in scanned.items() if leaks(text, sentinels)}
    assert found == {}
    # the oracle can fail: the Secrets themselves do hold the sentinels
    secret_json = control_plane.kubectl("get", "secrets", "-n", namespace, "-o", "json").stdout
    assert leaks(secret_json, sentinels)


def job_from_cluster(kube, namespace):
    from lorarl.control.stored import parse_stored

    return parse_stored(job(kube, namespace))[0]
