"""spec.serve on the real node: the seed job exports its adapter to a claim of the user's; the SGLang
stand-in (lorarl_dev/sglangstub.py, SGLang's LoRA endpoints from its source) runs in a pod of the
job image mounting that claim read-only, with an API key from a Secret; the operator's load Job
(real Job controller, scheduler, kubelet) asks it to load the adapter under the job's name; the
stand-in lists it in GET /v1/models, read inside its pod by kubectl exec.

Oracles outside lorarl: the kubelet's record of the load pod (exit code, termination message),
the stand-in's own /v1/models (which loaded the files from the claim as SGLang would)."""

from __future__ import annotations

import datetime
import json
import pathlib

import pytest
from lorarl_dev import hubstub, seedrun

from tests.e2e.conftest import MEASURED

pytestmark = pytest.mark.node

RUN_TIMEOUT = 900
SERVE_TIMEOUT = 300
CLAIM = "served-adapters"
KEY = "sk-e2e-sentinel-serve-21"  # noqa: S105 - a test value, searched for
STANDIN = pathlib.Path(__file__).resolve().parents[2] / "hack/devtools/lorarl_dev/sglangstub.py"
MODELS = "import json, os, urllib.request as u; r = u.Request('http://127.0.0.1:30000/v1/models', headers={'Authorization': 'Bearer ' + os.environ['K']}); print(json.dumps([c['id'] for c in json.load(u.urlopen(r))['data']]))"


def _when(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _apply(cp, obj: dict) -> None:
    cp.kubectl("apply", "-f", "-", input=json.dumps(obj))


def _sglang_standin(cp, ns: str, image: str) -> str:
    """The stand-in in a pod of the job image (restricted Pod Security), mounting the claim at /adapters: its URL."""
    _apply(
        cp, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sglang-standin", "namespace": ns}, "data": {"sglangstub.py": STANDIN.read_text()}}
    )
    args = ["python3", "/opt/standin/sglangstub.py", "--model-path", "Qwen/Qwen3-4B", "--host", "0.0.0.0", "--port", "30000"]  # noqa: S104 - the pod's address
    args += ["--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all", "--api-key", "$(SGLANG_API_KEY)"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sglang", "namespace": ns, "labels": {"app": "sglang"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "sglang",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": args,
                    "env": [{"name": "SGLANG_API_KEY", "valueFrom": {"secretKeyRef": {"name": "sglang-api-key", "key": "api-key"}}}],
                    "ports": [{"containerPort": 30000}],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 30000}, "periodSeconds": 2},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [
                        {"name": "standin", "mountPath": "/opt/standin", "readOnly": True},
                        {"name": "adapters", "mountPath": "/adapters", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "standin", "configMap": {"name": "sglang-standin"}},
                {"name": "adapters", "persistentVolumeClaim": {"claimName": CLAIM, "readOnly": True}},
            ],
        },
    }
    _apply(cp, pod)

    def ready():
        got = seedrun.get(cp, "pod", "sglang", ns) or {}
        ok = any(c["type"] == "Ready" and c["status"] == "True" for c in (got.get("status") or {}).get("conditions") or [])
        return got["status"].get("podIP") if ok else None

    ip = seedrun.wait_for("the SGLang stand-in's pod Ready", ready, 180)
    return f"http://{ip}:30000"


def test_the_seed_jobs_adapter_is_loaded_into_an_sglang_standin_under_the_jobs_name(real_node_cluster, hub, node_images, job_ns):
    cp, ns, name = real_node_cluster, job_ns, "qwen3-4b-lora-amd"
    revision = hub.revision({"seconds_per_rollout": 0.2, "adapter_data": 1}, config=hubstub.tiny_config())
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": ns}}
    claim["spec"] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}
    _apply(cp, claim)
    _apply(cp, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sglang-api-key", "namespace": ns}, "stringData": {"api-key": KEY}})
    url = _sglang_standin(cp, ns, node_images["job"])
    spec = {
        "model": {"architecture": hubstub.TINY_ARCHITECTURE},
        "lora": {"rank": 8, "alpha": 16},
        "export": {"destinations": [{"claim": {"claimName": CLAIM, "path": "team/"}}]},
        "serve": {"url": url, "apiKeySecretRef": {"name": "sglang-api-key", "key": "api-key"}, "claimMountPath": "/adapters"},
    }
    explain = seedrun.apply_seed(cp, image=node_images["job"], endpoint=hub.endpoint, name=name, namespace=ns, model_revision=revision, spec=spec)
    status = seedrun.wait_finished(cp, ns, name, RUN_TIMEOUT, explain)
    assert status["phase"] == "Succeeded", explain()
    status = seedrun.wait_for(
        "AdapterServed True or False",
        lambda: (lambda st: st if _condition(st, "AdapterServed").get("status") in ("True", "False") else None)(seedrun.job_status(cp, ns, name)),
        SERVE_TIMEOUT,
        explain=explain,
    )
    served = _condition(status, "AdapterServed")
    assert served["status"] == "True", (served, _condition(status, "AdapterExported"), explain())
    exported = _condition(status, "AdapterExported")
    seconds = (_when(served["lastTransitionTime"]) - _when(exported["lastTransitionTime"])).total_seconds()
    MEASURED.append(f"serve: AdapterExported=True -> AdapterServed=True in {seconds:.0f} s (the conditions' lastTransitionTime)")

    path = f"/adapters/team/{ns}/{name}/rollout-0000099"
    assert {k: status["serving"][k] for k in ("server", "name", "path")} == {"server": url, "name": name, "path": path}
    (pod,) = seedrun.pods(cp, ns, f"batch.kubernetes.io/job-name={name}-serve")
    ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert ended["exitCode"] == 0 and json.loads(ended["message"])["serving"]["name"] == name
    # the stand-in's own word, inside its pod
    listed = cp.kubectl("exec", "-n", ns, "sglang", "--", "sh", "-c", f'K="$SGLANG_API_KEY" python3 -c "{MODELS}"', timeout=60).stdout
    assert json.loads(listed.strip().splitlines()[-1]) == ["Qwen/Qwen3-4B", name]
    # the key by reference only: not in the job, the load Job, its pod
    written = [seedrun.get(cp, "lorarljob", name, ns), seedrun.get(cp, "job", f"{name}-serve", ns), pod]
    assert not [o for o in written if KEY in json.dumps(o)]
