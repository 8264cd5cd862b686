"""The export child: the exporter zipapp runs with the standard library alone (as in the job
image), and the rendered ConfigMap and Job are what the real API server admits, with the
credentials only as Secret references."""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import sys

import pytest
from lorarl.api import types as api
from lorarl.job import export_job
from lorarl.job.settings import RenderSettings
from lorarl.serving import serve_job

from tests.adapter import saves
from tests.api.apiserver import dry_run_apply

SECRET = "adapters-rw"


def job(namespace="ml"):
    doc = saves.tiny_job_doc(
        export={
            "destinations": [
                {"s3": {"bucket": "adapters", "endpoint": "http://minio.data:9000", "credentialsSecretName": SECRET}},
                {"claim": {"claimName": "served", "path": "team/"}},
            ]
        }
    )
    doc["metadata"]["namespace"] = namespace
    doc["status"] = saves.STATUS
    return api.LoraRLJob.model_validate(doc)


def test_the_zipapp_exports_with_the_standard_library_alone(tmp_path):
    _, cm, _ = export_job.children(job())
    app = tmp_path / "exporter.pyz"
    app.write_bytes(base64.b64decode(cm["binaryData"]["exporter.pyz"]))
    plan = json.loads(cm["data"]["plan.json"])
    plan["destinations"] = plan["destinations"][1:]  # the claim only: the s3 one needs botocore, which -I -S keeps out
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "status.json").write_text(cm["data"]["status.json"])
    saves.write_save(str(tmp_path / "ckpt"), 99)
    term = tmp_path / "term"
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(app), "--plan", str(tmp_path / "plan.json"), "--status", str(tmp_path / "status.json"),
         "--save-root", str(tmp_path / "ckpt"), "--claim-root", str(tmp_path / "mnt"), "--termination-log", str(term)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(term.read_text())
    assert report["adapter"]["uri"] == "pvc://served/team/ml/tiny-lora/rollout-0000099/"
    assert report["adapter"]["rawReward"] == 0.7
    out = pathlib.Path(tmp_path / "mnt/0/team/ml/tiny-lora/rollout-0000099")
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"]


def test_the_s3_keys_reach_the_pod_as_secret_references_only():
    *_, j = export_job.children(job())
    pod = j["spec"]["template"]["spec"]
    env = pod["containers"][0]["env"]
    refs = [e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e]
    assert refs == [{"name": SECRET, "key": "AWS_ACCESS_KEY_ID"}, {"name": SECRET, "key": "AWS_SECRET_ACCESS_KEY"}]
    assert all("value" not in e for e in env if e["name"].startswith("LORARL_EXPORT_"))
    assert pod["automountServiceAccountToken"] is False
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"] == {"claimName": "tiny-lora-data", "readOnly": True}


def test_the_hub_token_reaches_the_pod_as_a_secret_reference_only_and_xet_is_off():
    doc = saves.tiny_job_doc(
        export={"destinations": [{"hub": {"repo": "team/tiny-lora", "tokenSecretRef": {"name": "hub-rw", "key": "token"}}}, {"claim": {"claimName": "c"}}]}
    )
    env = export_job.children(api.LoraRLJob.model_validate(doc))[-1]["spec"]["template"]["spec"]["containers"][0]["env"]
    token = [e for e in env if e["name"] == "LORARL_EXPORT_0_HF_TOKEN"]
    assert token == [{"name": "LORARL_EXPORT_0_HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-rw", "key": "token"}}}]
    assert {"name": "HF_HUB_DISABLE_XET", "value": "1"} in env  # the protocol the tests exercise (docs/adapters.md)
    assert not any(e["name"] == "HF_TOKEN" for e in env)  # only the exporter reads the token, by index


@pytest.mark.controlplane
def test_the_api_server_admits_the_export_children(kube_api, namespace):
    _, cm, j = export_job.children(job(namespace))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tiny-lora-export-probe", "namespace": namespace}, "spec": j["spec"]["template"]["spec"]}
    for obj in (cm, j, pod):
        answer = dry_run_apply(kube_api, obj)
        assert answer.accepted, (obj["kind"], answer)


def test_the_export_reads_the_claim_as_the_jobs_pods_wrote_it():
    """Without runAsUser the job's pods ran as their image's user (root in miles' images) and the
    claim's root may be root's alone: the export container runs as uid 0 then, whatever its
    image's user (the operator image's is 65532), with no capability. With runAsUser, as it."""
    container = export_job.job_object(job())["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0}
    as_user = job()
    as_user.spec.run_policy.run_as_user = 1000
    pod = export_job.job_object(as_user)["spec"]["template"]["spec"]
    assert "runAsUser" not in pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["volumeMounts"][0] == {"name": "data", "mountPath": "/root/shared_data", "subPath": "shared_data", "readOnly": True}
    assert pod["containers"][0]["command"][-2:] == ["--save-root", "/root/shared_data/tiny-lora/checkpoints"]


def test_the_export_and_load_pods_run_the_operators_tools_image_unless_the_spec_names_one():
    """The job image need not have botocore or oras; the operator's tools image has both
    (tests/image checks the built image), so every destination works without a choice."""
    settings = RenderSettings(tools_image="registry.example/lorarl-operator@sha256:" + "a" * 64)
    assert export_job.job_object(job(), settings)["spec"]["template"]["spec"]["containers"][0]["image"] == settings.tools_image
    named = job()
    named.spec.export.image = "registry.example/exporter:1"
    assert export_job.job_object(named, settings)["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/exporter:1"
    assert export_job.job_object(job())["spec"]["template"]["spec"]["containers"][0]["image"] == RenderSettings().tools_image
    served = job()
    served.spec.serve = api.ServeSpec.model_validate({"url": "http://sglang.serving.svc:30000", "adapterPath": "/adapters/x"})
    assert serve_job.job_object(served, "/adapters/x", settings)["spec"]["template"]["spec"]["containers"][0]["image"] == settings.tools_image
    served.spec.export.image = "registry.example/exporter:1"
    assert serve_job.job_object(served, "/adapters/x", settings)["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/exporter:1"
