"""The SGLang stand-in (lorarl_dev/sglangstub.py) as a real process on loopback, spoken to over HTTP,
loading what the real exporter writes. Oracles independent of the stand-in: the real safetensors
library reads the same files (what SGLang's loader uses for them), and the refusals are the
messages SGLang 0.5.23's source writes (cited in the stand-in)."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import safetensors
from lorarl.adapter import export, package
from lorarl.api import types as api
from lorarl.job import export_plan

from tests.adapter import saves

# starts the SGLang stand-in: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

KEY = "sglang-standin-sentinel-key-5"  # a test value
NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def adapter(tmp_path_factory) -> pathlib.Path:
    """A save as miles writes it, exported by the real exporter to a claim directory."""
    root = tmp_path_factory.mktemp("export")
    saves.write_save(str(root / "checkpoints"), 99)
    job = api.LoraRLJob.model_validate(saves.tiny_job_doc(export={"destinations": [{"claim": {"claimName": "served", "path": ""}}]}))
    report = export.run(export_plan.export_plan(job), saves.STATUS, str(root / "checkpoints"), NOW, claim_root=str(root / "mnt"))
    assert report["ok"], report
    out = root / "mnt" / "0" / package.relative_dir(export_plan.export_plan(job), 99)
    with safetensors.safe_open(str(out / "adapter_model.safetensors"), "np") as f:  # the real reader agrees it is whole
        assert len(list(f.keys())) == 2 * 2 * 7
    return out


def start(tmp_path, *args, key: str | None = KEY) -> tuple[subprocess.Popen, str]:
    port_file = tmp_path / f"port-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "lorarl_dev.sglangstub", "--model-path", "Qwen/Qwen3-4B", "--port", "0", "--port-file", str(port_file), *args]
    if key:
        argv += ["--api-key", key]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(200):
        if port_file.exists():
            return proc, f"http://127.0.0.1:{port_file.read_text()}"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=10)
    raise AssertionError(f"the stand-in did not start: {out}{err}")


@pytest.fixture
def server(tmp_path):
    procs = []

    def run(*args, key: str | None = KEY) -> str:
        proc, url = start(tmp_path, *args, key=key)
        procs.append(proc)
        return url

    yield run
    for proc in procs:
        proc.terminate()
        proc.communicate(timeout=10)


def call(url: str, path: str, body: dict | None = None, key: str | None = KEY) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(), method="GET" if body is None else "POST")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - loopback
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def served(url: str) -> dict[str, dict]:
    status, body = call(url, "/v1/models")
    assert status == 200, body
    return {card["id"]: card for card in body["data"]}


def test_an_exported_adapter_loads_and_is_listed_under_its_name(server, adapter):
    url = server("--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", *ALL)
    status, body = call(url, "/load_lora_adapter", {"lora_name": "tiny-lora", "lora_path": str(adapter)})
    assert (status, body) == (200, {"success": True, "error_message": "", "loaded_adapters": {"tiny-lora": str(adapter)}})
    cards = served(url)
    assert cards["tiny-lora"]["root"] == str(adapter) and cards["tiny-lora"]["parent"] == "Qwen/Qwen3-4B"
    assert cards["Qwen/Qwen3-4B"]["object"] == "model"
    # the same name again is refused and nothing changes
    status, body = call(url, "/load_lora_adapter", {"lora_name": "tiny-lora", "lora_path": str(adapter)})
    assert status == 400 and body["error_message"] == "Failed to load LoRA adapter tiny-lora because it is already loaded"
    # unload, then it is gone; unloading it again is refused
    assert call(url, "/unload_lora_adapter", {"lora_name": "tiny-lora"}) == (200, {"success": True, "error_message": "", "loaded_adapters": {}})
    assert "tiny-lora" not in served(url)
    status, body = call(url, "/unload_lora_adapter", {"lora_name": "tiny-lora"})
    assert status == 400 and body["error_message"].startswith("LoRA with name tiny-lora does not exist.")


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--max-lora-rank", "4", "--lora-target-modules", *ALL], "rank above --max-lora-rank"),
        (["--max-lora-rank", "8", "--lora-target-modules", "q_proj", "o_proj"], "target modules not enabled"),
    ],
)
def test_an_adapter_the_memory_pool_cannot_hold_is_refused(server, adapter, flags, why):
    url = server("--enable-lora", *flags)
    status, body = call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(adapter)})
    assert status == 400, why
    assert body["error_message"].startswith("LoRA adapter a with rank 8 is incompatible with the current LoRA memory pool configuration.")
    assert list(served(url)) == ["Qwen/Qwen3-4B"]


def test_q_k_v_are_one_fused_module_as_in_sglang(server, adapter):
    """lora/utils.py: q_proj, k_proj, v_proj all normalize to qkv_proj (gate/up to gate_up_proj)."""
    url = server("--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "q_proj", "o_proj", "gate_proj", "down_proj")
    assert call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(adapter)})[0] == 200


def test_a_broken_export_is_refused(server, adapter, tmp_path):
    url = server("--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all")
    no_config = tmp_path / "no-config"
    shutil.copytree(adapter, no_config)
    (no_config / "adapter_config.json").unlink()
    status, body = call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(no_config)})
    assert status == 400 and body["error_message"] == f"[Errno 2] No such file or directory: '{no_config}/adapter_config.json'"

    no_weights = tmp_path / "no-weights"
    shutil.copytree(adapter, no_weights)
    (no_weights / "adapter_model.safetensors").unlink()
    status, body = call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(no_weights)})
    assert status == 400 and body["error_message"] == f"Cannot find any model weights with `{no_weights}`"

    torn = tmp_path / "torn"
    shutil.copytree(adapter, torn)
    weights = torn / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: os.path.getsize(weights) // 2])
    with pytest.raises(Exception):  # noqa: B017,PT011 - the real reader refuses it too (its error type is internal)
        with safetensors.safe_open(str(weights), "np") as f:
            [f.get_tensor(k) for k in f.keys()]
    status, body = call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(torn)})
    assert status == 400 and "MetadataIncompleteBuffer" in body["error_message"]

    no_rank = tmp_path / "no-rank"
    shutil.copytree(adapter, no_rank)
    cfg = json.loads((no_rank / "adapter_config.json").read_text())
    del cfg["r"]
    (no_rank / "adapter_config.json").write_text(json.dumps(cfg))
    status, body = call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(no_rank)})
    assert status == 400 and body["error_message"] == "'r'"
    assert list(served(url)) == ["Qwen/Qwen3-4B"]  # no failed load is listed


def test_the_api_key_guards_everything_but_health(server, adapter):
    url = server("--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all")
    for key in (None, "wrong"):
        assert call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(adapter)}, key=key) == (401, {"error": "Unauthorized"})
        assert call(url, "/v1/models", key=key) == (401, {"error": "Unauthorized"})
    with urllib.request.urlopen(url + "/health", timeout=10) as resp:  # noqa: S310 - loopback
        assert resp.status == 200
    assert list(served(url)) == ["Qwen/Qwen3-4B"]


def test_without_enable_lora_a_load_is_refused(server, adapter):
    url = server(key=None)
    status, body = call(url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(adapter)}, key=None)
    assert (status, body) == (
        400,
        {"success": False, "error_message": "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.", "loaded_adapters": None},
    )


def test_a_request_without_lora_path_is_a_validation_error(server):
    url = server("--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all")
    status, body = call(url, "/load_lora_adapter", {"lora_name": "a"})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "lora_path"]


def test_lora_paths_are_loaded_at_start_and_infer_rank_and_modules(server, adapter, tmp_path):
    url = server("--lora-paths", f"tiny={adapter}")
    assert served(url)["tiny"]["root"] == str(adapter)
    # the pool was sized from it: a same-shaped adapter loads, under another name
    assert call(url, "/load_lora_adapter", {"lora_name": "again", "lora_path": str(adapter)})[0] == 200


def test_a_start_without_adapters_needs_rank_and_modules_and_a_bad_adapter_ends_it(tmp_path):
    for args, said in [
        (["--enable-lora"], "you need to specify both --max-lora-rank and --lora-target-modules"),
        (["--lora-paths", f"x={tmp_path}"], "Failed to load LoRA adapter x: [Errno 2] No such file or directory"),
    ]:
        with pytest.raises(AssertionError, match=r"did not start") as err:
            start(tmp_path, *args)
        assert said in str(err.value)
