"""The adapter's export on the real node: after the seed job succeeded (real KubeRay, real Ray,
the trainer stand-in writing a PEFT export with its tensors), the operator (helm-installed, its
chart's RBAC) creates the export Job; the real Job controller, scheduler and kubelet run its pod
in the job image, which converts the newest complete save and writes it to a claim of the
user's; its termination message becomes status.adapter; `lorarl adapter pull` reads the claim's
directory back and verifies every digest against status.adapter.digest.

The oracles outside lorarl: the kubelet's pod status (the container's exit code and termination
message), the files on the claim's volume (read from its host directory), the real safetensors
library. The model is two-layer (hubstub.TINY_ARCHITECTURE): the seed's real adapter is ~264 MB
per save."""

from __future__ import annotations

import datetime
import json
import pathlib

import pytest
from lorarl_dev import hubstub, seedrun

from tests.e2e.conftest import MEASURED
from tests.helpers import lorarl_cli

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900
EXPORT_TIMEOUT = 300
CLAIM = "served-adapters"


def _when(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _host_dir(cp, ns: str, claim: str) -> pathlib.Path:
    pvc = seedrun.get(cp, "pvc", claim, ns)
    pv = seedrun.get(cp, "pv", pvc["spec"]["volumeName"], "")
    return pathlib.Path(pv["spec"]["hostPath"]["path"])


def test_the_seed_job_exports_its_adapter_to_a_claim_and_pull_verifies_it(real_node_cluster, hub, node_images, job_ns, tmp_path):
    cp, ns, name = real_node_cluster, job_ns, "qwen3-4b-lora-amd"
    revision = hub.revision({"seconds_per_rollout": 0.2, "adapter_data": 1}, config=hubstub.tiny_config())
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": ns}}
    claim["spec"] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}
    cp.kubectl("apply", "-f", "-", input=json.dumps(claim))
    spec = {
        "model": {"architecture": hubstub.TINY_ARCHITECTURE},
        "lora": {"rank": 8, "alpha": 16},
        "export": {"destinations": [{"claim": {"claimName": CLAIM, "path": "team/"}}]},
    }
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, spec=spec)

    status = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert status["phase"] == "Succeeded", explain()
    status = seedrun.wait_for(
        "AdapterExported True or False",
        lambda: (lambda st: st if _condition(st, "AdapterExported").get("status") in ("True", "False") else None)(seedrun.job_status(cp, ns, name)),
        EXPORT_TIMEOUT,
        explain=explain,
    )
    exported = _condition(status, "AdapterExported")
    assert exported["status"] == "True", (exported, explain())
    seconds = (_when(exported["lastTransitionTime"]) - _when(status["completionTime"])).total_seconds()
    MEASURED.append(f"export: Succeeded -> AdapterExported=True in {seconds:.0f} s (completionTime to the condition's lastTransitionTime)")

    adapter = status["adapter"]
    assert adapter["uri"] == f"pvc://{CLAIM}/team/{ns}/{name}/rollout-0000099/", adapter
    assert adapter["digest"].startswith("sha256:") and adapter["format"] == "peft-safetensors" and adapter["rollout"] == 99
    assert adapter["baseModel"] == "Qwen/Qwen3-4B" and adapter["baseModelRevision"] == revision

    # the pod really ran: the kubelet's record of its container, and the report it wrote
    (pod,) = seedrun.pods(cp, ns, f"batch.kubernetes.io/job-name={name}-export")
    ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert ended["exitCode"] == 0 and json.loads(ended["message"])["adapter"]["digest"] == adapter["digest"]
    assert pod["spec"]["automountServiceAccountToken"] is False

    # the files on the claim, pulled back and verified against the job's digest
    exported_dir = _host_dir(cp, ns, CLAIM) / "team" / ns / name / "rollout-0000099"
    files = sorted(p.name for p in exported_dir.iterdir())
    assert files == ["adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"], files
    assert sum(p.stat().st_size for p in exported_dir.iterdir()) == adapter["size"]
    pulled = tmp_path / "pulled"
    result = lorarl_cli("adapter", "pull", str(exported_dir), str(pulled), "--digest", adapter["digest"])
    assert result.exit_code == 0 and "2 files verified" in result.stdout, (result.stdout, result.stderr)  # the manifest names the other two
    config = json.loads((pulled / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "Qwen/Qwen3-4B" and config["r"] == 8

    from safetensors import safe_open

    with safe_open(str(pulled / "adapter_model.safetensors"), "np") as f:
        assert len(list(f.keys())) == 2 * 7 * 2

    # a tampered copy is refused, naming the file
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    for p in exported_dir.iterdir():
        data = p.read_bytes()
        (tampered / p.name).write_bytes(data[:-1] + bytes([data[-1] ^ 1]) if p.name == "adapter_model.safetensors" else data)
    refused = lorarl_cli("adapter", "pull", str(tampered), str(tmp_path / "nope"), "--digest", adapter["digest"])
    assert refused.exit_code == 1 and "adapter_model.safetensors" in refused.stderr and not (tmp_path / "nope").exists()
