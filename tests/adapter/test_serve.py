"""spec.serve, short of the cluster: the load pod's program (lorarl/serving/loader.py, run as the pod
runs it: ``python3 -I loader.py`` from the ConfigMap's text) against the SGLang stand-in serving
what the real exporter wrote; the pure render of the load Job; the pure mapping of its pods'
reports to AdapterServed and status.serving. The live wiring is tests/operator/test_serve_live.py."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

import pytest
from lorarl.adapter import export, package
from lorarl.api import types as api
from lorarl.control import serve_status
from lorarl.job import export_plan
from lorarl.serving import serve_job

from tests.adapter import saves
from tests.helpers import start_sglang_standin

# starts the SGLang stand-in: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

KEY = "sk-serve-sentinel-21-item-5"  # noqa: S105 - a test value, searched for
NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    saves.write_save(str(root / "ckpt"), 99)
    j = api.LoraRLJob.model_validate(saves.tiny_job_doc(export={"destinations": [{"claim": {"claimName": "served", "path": "team/"}}]}))
    report = export.run(export_plan.export_plan(j), saves.STATUS, str(root / "ckpt"), NOW, claim_root=str(root / "mnt"))
    assert report["ok"], report
    return root / "mnt" / "0" / "team" / package.relative_dir(export_plan.export_plan(j), 99), report["adapter"]


@pytest.fixture
def sglang(tmp_path, service_netns):
    procs = []

    def start(*args):
        # off loopback, which the load pod refuses: in a network namespace of the harness
        proc, url = start_sglang_standin(tmp_path, "--enable-lora", *args, host=service_netns.ADDRESS, prefix=service_netns.prefix)
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        proc.terminate()
        proc.communicate(timeout=10)


def load(tmp_path, netns, url, name, path, key=KEY, replace=False):
    """The loader as the pod runs it: its ConfigMap text, python3 -I (no lorarl, no site-packages),
    in the namespace ``netns`` where the server is."""
    script = tmp_path / "loader.py"
    script.write_text(serve_job.loader_source())
    (tmp_path / serve_job.EGRESS_FILE).write_text(serve_job.egress_source())
    log = tmp_path / "termination-log"
    argv = [*netns.prefix, sys.executable, "-I", str(script), "--url", url, "--name", name, "--path", str(path), "--termination-log", str(log)]
    env = {"SGLANG_API_KEY": key} if key else {}
    done = subprocess.run(argv + (["--replace"] if replace else []), env=env, capture_output=True, text=True, timeout=60, check=False)
    assert KEY not in done.stdout + done.stderr + log.read_text()
    return done.returncode, json.loads(log.read_text())


def models(netns, url):
    import urllib.request

    def ask():
        req = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the harness's namespace
            return {c["id"]: c for c in json.loads(resp.read())["data"]}

    return netns.call(ask)


def test_the_exported_adapter_is_loaded_and_listed(sglang, adapter, tmp_path, service_netns):
    url = sglang("--max-lora-rank", "8", "--lora-target-modules", *MODULES, "--api-key", KEY)
    code, report = load(tmp_path, service_netns, url, "tiny-lora", adapter[0])
    assert code == 0 and report["ok"], report
    assert {k: v for k, v in report["serving"].items() if k != "loadTime"} == {"server": url, "name": "tiny-lora", "path": str(adapter[0])}
    assert datetime.datetime.fromisoformat(report["serving"]["loadTime"]).tzinfo is not None
    assert models(service_netns, url)["tiny-lora"]["root"] == str(adapter[0])
    state = serve_status.serve_state({"metadata": {"name": "j-serve"}}, [pod("p1", json.dumps(report), 0)])
    assert (state.status, state.reason, state.serving["name"]) == ("True", "Served", "tiny-lora")


def test_a_name_clash_is_refused_unless_replace(sglang, adapter, tmp_path, service_netns):
    url = sglang("--max-lora-rank", "8", "--lora-target-modules", "all", "--api-key", KEY)
    assert load(tmp_path, service_netns, url, "tiny-lora", adapter[0])[0] == 0
    code, report = load(tmp_path, service_netns, url, "tiny-lora", adapter[0])
    assert code == 2 and report["reason"] == "AdapterNameTaken" and "spec.serve.replace" in report["message"]
    code, report = load(tmp_path, service_netns, url, "tiny-lora", adapter[0], replace=True)
    assert code == 0 and report["ok"]
    assert list(models(service_netns, url)) == ["Qwen/Qwen3-4B", "tiny-lora"]


def test_refusals_are_named_and_bounded_and_never_hold_the_key(sglang, adapter, tmp_path, service_netns):
    url = sglang("--max-lora-rank", "4", "--lora-target-modules", "all", "--api-key", KEY)
    code, report = load(tmp_path, service_netns, url, "tiny-lora", adapter[0])
    assert code == 2 and report["reason"] == "LoadRefused"
    assert "HTTP 400" in report["message"] and "incompatible" not in report["message"]  # no text of the server's (issue 35)
    code, report = load(tmp_path, service_netns, url, "tiny-lora", adapter[0], key="wrong-key")
    assert code == 2 and report["reason"] == "Unauthorized" and "apiKeySecretRef" in report["message"]
    (tmp_path / "empty").mkdir()
    code, report = load(tmp_path, service_netns, url, "tiny-lora", tmp_path / "empty")
    assert code == 2 and report["reason"] == "LoadRefused" and "adapter_config.json" not in report["message"]


def test_an_unreachable_server_is_retried(tmp_path, adapter, service_netns):
    code, report = load(tmp_path, service_netns, f"http://{service_netns.ADDRESS}:9", "tiny-lora", adapter[0])
    assert code == 1 and report["reason"] == "ServerUnreachable"


def job(**serve):
    doc = saves.tiny_job_doc(
        export={"destinations": [{"s3": {"bucket": "adapters"}}, {"claim": {"claimName": "served", "path": "team/"}}]},
        serve={"url": "http://sglang.serving.svc:30000", **serve},
    )
    return api.LoraRLJob.model_validate(doc)


def test_the_load_job_takes_the_key_from_its_secret_and_derives_the_path_from_the_claim_uri(adapter):
    j = job(claimMountPath="/models/", apiKeySecretRef={"name": "sglang-key", "key": "api-key"})
    assert serve_job.children(j) == []  # nothing to load before status.adapter names the claim
    exported = dict(adapter[1], uris=["s3://adapters/ml/tiny-lora/rollout-0000099/", "pvc://served/team/ml/tiny-lora/rollout-0000099/"])
    j = j.model_copy(update={"status": {"adapter": exported}})
    _, cm, load_job = serve_job.children(j)
    container = load_job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][container["command"].index("--path") + 1] == "/models/team/ml/tiny-lora/rollout-0000099"
    assert container["command"][container["command"].index("--name") + 1] == "tiny-lora"  # the job's name
    assert {"name": "SGLANG_API_KEY", "valueFrom": {"secretKeyRef": {"name": "sglang-key", "key": "api-key"}}} in container["env"]
    assert cm["data"]["loader.py"] == serve_job.loader_source()
    assert load_job["metadata"]["ownerReferences"][0]["name"] == "tiny-lora"
    explicit = job(adapterPath="/srv/adapter", adapterName="mine", replace=True)
    command = serve_job.children(explicit)[-1]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-5:] == ["--name", "mine", "--path", "/srv/adapter", "--replace"]


def pod(name, message, code):
    term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-12-04T12:00:00Z"},
        "status": {"containerStatuses": [{"name": "load", "state": {"terminated": term}}]},
    }


def test_a_refusal_is_retrying_until_the_job_failed_then_false_and_stalled():
    line = json.dumps({"ok": False, "reason": "ServerUnreachable", "message": "x" * 5000})
    retrying = serve_status.serve_state({"metadata": {"name": "j-serve"}}, [pod("p1", line, 1)])
    assert (retrying.status, retrying.reason, retrying.stalled) == ("Unknown", "Retrying", False) and len(retrying.message) <= 1024
    failed = serve_status.serve_state({"metadata": {"name": "j-serve"}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}, [pod("p1", line, 2)])
    assert (failed.status, failed.reason, failed.stalled) == ("False", "ServerUnreachable", True)
    assert serve_status.serve_state(None, []).status == "Unknown"
