"""``lorarl serve manifest``: the SGLang server workload that starts with a job's exported adapter.
Oracles: the SGLang stand-in started with the rendered flags (SGLang's parser and start-up rules,
cited there) loads the real exporter's files from the rendered path and lists the adapter; the
real API server accepts the Deployment and Service (server-side dry run, strict fields)."""

from __future__ import annotations

import datetime
import json
import urllib.request

import pytest
import yaml
from kubernetes import client as k8s
from lorarl.adapter import export
from lorarl.api import types as api
from lorarl.job import export_plan

from tests.adapter import saves
from tests.helpers import lorarl_cli, start_sglang_standin

# starts the SGLang stand-in: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)
KEY = "sk-workload-sentinel-21"  # noqa: S105 - a test value


@pytest.fixture
def exported_job(tmp_path):
    """A job whose status.adapter is what the real exporter reported for its claim destination."""
    doc = saves.tiny_job_doc(lora={"rank": 8, "alpha": 16}, export={"destinations": [{"claim": {"claimName": "served", "path": "team/"}}]})
    job = api.LoraRLJob.model_validate(doc)
    saves.write_save(str(tmp_path / "ckpt"), 99)
    report = export.run(export_plan.export_plan(job), saves.STATUS, str(tmp_path / "ckpt"), NOW, claim_root=str(tmp_path / "mnt"))
    assert report["ok"], report
    doc["status"] = {"adapter": report["adapter"]}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def render(job_file, *extra):
    result = lorarl_cli("serve", "manifest", "-f", str(job_file), "--image", "lmsysorg/sglang:v0.5.23-rocm", *extra)
    assert result.exit_code == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def test_the_rendered_flags_start_sglang_with_the_adapter_loaded(exported_job, tmp_path):
    deployment, service = render(exported_job, "--mount-path", str(tmp_path / "mnt" / "0"), "--api-key-secret", "sglang:api-key")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "SGLANG_API_KEY", "valueFrom": {"secretKeyRef": {"name": "sglang", "key": "api-key"}}}]
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "served", "readOnly": True}
    assert service["spec"]["ports"][0]["port"] == 30000
    # the server's own start-up, with the kubelet's $(SGLANG_API_KEY) expansion and the test's port
    args, drop = [], {"--host", "--port"}
    words = iter(container["args"])
    for word in words:
        if word in drop:
            next(words)
            continue
        args.append(KEY if word == "$(SGLANG_API_KEY)" else word)
    proc, url = start_sglang_standin(tmp_path, *args)
    try:
        req = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - loopback
            cards = {c["id"]: c for c in json.loads(resp.read())["data"]}
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert cards["tiny-lora"]["root"] == str(tmp_path / "mnt" / "0" / "team" / "ml" / "tiny-lora" / "rollout-0000099")
    assert "--max-lora-rank" in container["args"] and container["args"][container["args"].index("--max-lora-rank") + 1] == "8"


def test_a_job_without_an_exported_adapter_is_refused_plainly(tmp_path):
    doc = saves.tiny_job_doc(export={"destinations": [{"claim": {"claimName": "served"}}]})
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    result = lorarl_cli("serve", "manifest", "-f", str(tmp_path / "job.yaml"), "--image", "sglang")
    assert result.exit_code == 1 and "status.adapter names no directory on a claim destination" in result.stderr


@pytest.mark.controlplane
def test_the_api_server_accepts_the_workload(exported_job, kube, namespace):
    deployment, service = render(exported_job, "--api-key-secret", "sglang:api-key")
    for obj in (deployment, service):
        obj["metadata"]["namespace"] = namespace
    k8s.AppsV1Api(kube.client).create_namespaced_deployment(namespace, deployment, dry_run="All", field_validation="Strict")
    k8s.CoreV1Api(kube.client).create_namespaced_service(namespace, service, dry_run="All", field_validation="Strict")
