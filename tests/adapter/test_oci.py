"""Export to an OCI registry and pull back, through the CLI as the export pod and a user run it:
the registry is go-containerregistry's (`crane registry serve`, a real OCI distribution API), the
client is oras-py; what was pushed is read back by crane itself, an oracle independent of the
exporter: the manifest's artifactType, its empty config and one layer per file titled with its
name (as `oras push` lays files out), and each blob's bytes equal to the packaged file."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys

import pytest
from lorarl.api import types as api
from lorarl.job import export_plan
from lorarl_dev import registry as oci_registry

from tests.adapter import saves

# starts an OCI registry (crane) and the oras client: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

CLI = [sys.executable, "-m", "lorarl.cli"]
SENTINEL_PASSWORD = "oci21-sentinel-password-do-not-print"


def _plan(tmp_path, address, **oci):
    doc = saves.tiny_job_doc(export={"destinations": [{"oci": {"repository": f"{address}/adapters/tiny", "plainHttp": True, **oci}}]})
    (tmp_path / "status.json").write_text(json.dumps(saves.STATUS))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(export_plan.export_plan(api.LoraRLJob.model_validate(doc))))
    return path


def _export(tmp_path, oras_path, plan_file, auth_root=None):
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    saves.write_save(str(tmp_path / "checkpoints"), 99)
    env = {**os.environ, "PYTHONPATH": oras_path, "DOCKER_CONFIG": str(tmp_path / "no-docker-config")}
    term = tmp_path / "termination-log"
    code = (
        "import datetime, json, sys\n"
        "from lorarl.adapter import export\n"
        f"plan = json.load(open({str(plan_file)!r})); status = json.load(open({str(tmp_path / 'status.json')!r}))\n"
        f"report = export.run(plan, status, {str(tmp_path / 'checkpoints')!r}, datetime.datetime.now(datetime.UTC), auth_root={str(auth_root or tmp_path / 'no-auth')!r})\n"
        f"open({str(term)!r}, 'w').write(export.termination_message(report)); print(json.dumps(report)); sys.exit(0 if report['ok'] else 1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    return done, term.read_text() if term.exists() else ""


def test_export_pushes_an_oras_style_artifact_that_crane_reads_and_pull_verifies(tmp_path, registry, oras_path):
    done, term = _export(tmp_path, oras_path, _plan(tmp_path, registry))
    assert done.returncode == 0, done.stderr + done.stdout
    adapter = json.loads(term)["adapter"]
    reference = f"{registry}/adapters/tiny:tiny-lora-rollout-0000099"
    assert adapter["uri"] == f"oci://{reference}"

    # the oracle: crane reads the manifest and every blob
    got = oci_registry.read("manifest", reference)
    assert got.returncode == 0, got.stderr
    manifest = json.loads(got.stdout)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["artifactType"] == "application/vnd.lorarl.adapter.v1"
    assert manifest["config"] == {"mediaType": "application/vnd.oci.empty.v1+json", "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest(), "size": 2}
    titles = [layer["annotations"]["org.opencontainers.image.title"] for layer in manifest["layers"]]
    assert titles == ["adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"], titles
    assert {layer["mediaType"] for layer in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar"}
    assert manifest["annotations"]["org.opencontainers.image.created"] == adapter["exportTime"]
    blobs = {}
    for layer in manifest["layers"]:
        blob = oci_registry.read("blob", f"{registry}/adapters/tiny@{layer['digest']}")
        assert blob.returncode == 0 and len(blob.stdout) == layer["size"] and "sha256:" + hashlib.sha256(blob.stdout).hexdigest() == layer["digest"]
        blobs[layer["annotations"]["org.opencontainers.image.title"]] = blob.stdout
    assert "sha256:" + hashlib.sha256(blobs["lorarl-adapter.json"]).hexdigest() == adapter["digest"]  # the manifest is the adapter's digest
    assert sum(len(b) for b in blobs.values()) == adapter["size"]

    # pulled back by our CLI, verified against the digest
    env = {**os.environ, "PYTHONPATH": oras_path, "DOCKER_CONFIG": str(tmp_path / "no-docker-config")}
    target = tmp_path / "pulled"
    pulled = subprocess.run(
        [*CLI, "adapter", "pull", adapter["uri"], str(target), "--digest", adapter["digest"], "--plain-http"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert "2 files verified, rollout 99" in pulled.stdout
    assert {p.name: p.read_bytes() for p in target.iterdir()} == blobs

    # a wrong digest: refused, nothing kept
    wrong = subprocess.run(
        [*CLI, "adapter", "pull", adapter["uri"], str(tmp_path / "wrong"), "--digest", "sha256:" + "1" * 64, "--plain-http"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 1 and "lorarl-adapter.json" in wrong.stderr and not (tmp_path / "wrong").exists()


def test_credentials_come_from_a_docker_config_file_and_are_never_printed(tmp_path, registry, oras_path):
    """crane's registry asks for no credentials, so this checks the path the Secret takes (a file
    oras reads) and that the password reaches no output; the sentinel is in the file only."""
    auth_root = tmp_path / "auth"
    (auth_root / "0").mkdir(parents=True)
    token = base64.b64encode(f"exporter:{SENTINEL_PASSWORD}".encode()).decode()
    (auth_root / "0" / "config.json").write_text(json.dumps({"auths": {registry: {"auth": token}}}))
    done, term = _export(tmp_path, oras_path, _plan(tmp_path, registry, credentialsSecretName="registry-rw", tag="named"), auth_root=auth_root)
    assert done.returncode == 0, done.stderr
    assert json.loads(term)["adapter"]["uri"] == f"oci://{registry}/adapters/tiny:named"
    for text in (done.stdout, done.stderr, term):
        assert SENTINEL_PASSWORD not in text and token not in text
