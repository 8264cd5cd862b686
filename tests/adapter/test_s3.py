"""Export to an S3 server and pull back, through the CLI as the export pod and a user run it
(moto's S3 server: requests are real HTTP, SigV4-signed by botocore); the credentials never
appear in what they print, in the termination message or in the stored objects."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from lorarl.api import types as api
from lorarl.job import export_plan

from tests.adapter import saves

# starts an S3 server (moto) in a venv of its own: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

SENTINEL_KEY_ID = "AKIAEXPORTSENTINEL21"
SENTINEL_SECRET = "export21-sentinel-secret-value-do-not-print"
CLI = [sys.executable, "-m", "lorarl.cli"]


def _job_file(tmp_path, endpoint, bucket="adapters"):
    doc = saves.tiny_job_doc(
        export={"destinations": [{"s3": {"bucket": bucket, "prefix": "runs/", "endpoint": endpoint, "credentialsSecretName": "adapters-rw"}}]}
    )
    (tmp_path / "status.json").write_text(json.dumps(saves.STATUS))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(export_plan.export_plan(api.LoraRLJob.model_validate(doc))))
    return path


def _export(tmp_path, botocore_path, job_file):
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    saves.write_save(str(tmp_path / "checkpoints"), 99)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "PYTHONPATH": botocore_path,
        "LORARL_EXPORT_0_AWS_ACCESS_KEY_ID": SENTINEL_KEY_ID,
        "LORARL_EXPORT_0_AWS_SECRET_ACCESS_KEY": SENTINEL_SECRET,
    }
    term = tmp_path / "termination-log"
    args = [
        "adapter",
        "export",
        "--plan",
        str(job_file),
        "--status",
        str(tmp_path / "status.json"),
        "--save-root",
        str(tmp_path / "checkpoints"),
        "--termination-log",
        str(term),
    ]
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)
    return done, term.read_text()


def _no_secret(*texts):
    for text in texts:
        assert SENTINEL_SECRET not in text and SENTINEL_KEY_ID not in text


def test_export_to_s3_and_pull_back_verified(tmp_path, s3, botocore_path):
    endpoint, run = s3
    done, term = _export(tmp_path, botocore_path, _job_file(tmp_path, endpoint))
    assert done.returncode == 0, done.stderr
    report = json.loads(term)
    prefix = "runs/ml/tiny-lora/rollout-0000099/"
    assert report["adapter"]["uri"] == f"s3://adapters/{prefix}"
    listed = json.loads(run("import json; print(json.dumps(sorted(o['Key'] for o in s3.list_objects_v2(Bucket='adapters')['Contents'])))"))
    assert listed == [prefix + n for n in ("adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json")]
    stored = run(f"import sys\nfor k in {listed!r}: sys.stdout.write(s3.get_object(Bucket='adapters', Key=k)['Body'].read().decode('latin-1'))")
    _no_secret(done.stdout, done.stderr, term, stored)

    pull_env = {
        **os.environ,
        "PYTHONPATH": botocore_path,
        "AWS_ACCESS_KEY_ID": "AKIDREADER",
        "AWS_SECRET_ACCESS_KEY": "reader",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    target = tmp_path / "pulled"
    pulled = subprocess.run(
        [*CLI, "adapter", "pull", report["adapter"]["uri"], str(target), "--digest", report["adapter"]["digest"], "--endpoint", endpoint],
        env=pull_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert "3 files verified" not in pulled.stdout  # two files plus the manifest: the manifest lists two
    assert "2 files verified, rollout 99" in pulled.stdout
    assert sorted(p.name for p in target.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"]

    # a changed object in the bucket: the pull fails naming it, and keeps nothing
    run(f"s3.put_object(Bucket='adapters', Key='{prefix}adapter_config.json', Body=b'{{}}')")
    again = subprocess.run(
        [*CLI, "adapter", "pull", report["adapter"]["uri"], str(tmp_path / "again"), "--endpoint", endpoint],
        env=pull_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 1 and "adapter_config.json" in again.stderr, again.stderr
    assert not (tmp_path / "again").exists()


def test_a_refusing_store_is_reported_with_its_error_code_and_no_credential(tmp_path, s3, botocore_path):
    endpoint, _ = s3
    done, term = _export(tmp_path, botocore_path, _job_file(tmp_path, endpoint, bucket="no-such-bucket"))
    assert done.returncode == 1
    report = json.loads(term)
    assert report["reason"] == "DestinationFailed" and "spec.export.destinations[0]" in report["message"] and "NoSuchBucket" in report["message"], report
    _no_secret(done.stdout, done.stderr, term)


@pytest.mark.controlplane
def test_pull_by_job_name_reads_uri_and_digest_from_the_stored_status(tmp_path, s3, botocore_path, control_plane, kube_api, namespace):
    from kubernetes import client

    endpoint, _ = s3
    done, term = _export(tmp_path, botocore_path, _job_file(tmp_path, endpoint))
    assert done.returncode == 0, done.stderr
    adapter = json.loads(term)["adapter"]
    custom = client.CustomObjectsApi(kube_api)
    doc = saves.tiny_job_doc()
    doc["metadata"] = {"name": "tiny-lora", "namespace": namespace}
    custom.create_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, doc)
    # the API server stores the exporter's report as status.adapter: its schema admits it as it is
    stored = custom.patch_namespaced_custom_object_status(api.GROUP, api.VERSION, namespace, api.PLURAL, "tiny-lora", {"status": {"adapter": adapter}})
    assert stored["status"]["adapter"] == adapter

    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.kubeconfig),
        "PYTHONPATH": botocore_path,
        "AWS_ACCESS_KEY_ID": "AKIDREADER",
        "AWS_SECRET_ACCESS_KEY": "reader",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    pulled = subprocess.run(
        [*CLI, "adapter", "pull", "-n", namespace, "tiny-lora", str(tmp_path / "by-name"), "--endpoint", endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "by-name" / "adapter_model.safetensors").is_file()

    # a status digest other than the manifest's: refused, nothing kept
    custom.patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, namespace, api.PLURAL, "tiny-lora", {"status": {"adapter": {"digest": "sha256:" + "1" * 64}}}
    )
    wrong = subprocess.run(
        [*CLI, "adapter", "pull", "-n", namespace, "tiny-lora", str(tmp_path / "wrong"), "--endpoint", endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 1 and "expected sha256:1111" in wrong.stderr, wrong.stderr
    assert not (tmp_path / "wrong").exists()
