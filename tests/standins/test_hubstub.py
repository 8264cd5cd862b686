"""The Hub stand-in, driven by the real ``hf`` CLI of two huggingface_hub releases (the test
venv's 2.x, and the job image's pin in a venv cached under ~/.cache/lorarl/venvs), and the real
prepare.sh downloading the seed's three inputs from it for the trainer stand-in."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from lorarl.job import render
from lorarl_dev import hubstub
from lorarl_dev.venvs import cached_venv

from tests.helpers import REPO, job_from, seed_doc
from tests.standins.standin_lib import mapped, rendered_argv, run_trainer

VENV_HF = shutil.which("hf", path=os.path.dirname(sys.executable))
# starts the Hub stand-in, and the job image's hf in a venv: the api tier (tests/conftest.py)
pytestmark = [pytest.mark.servers, pytest.mark.skipif(VENV_HF is None, reason="the hf CLI (huggingface_hub, test extra) is not installed")]
TOKEN = "hf_standin_secret_token_1234"


def image_hf_version() -> str:
    """The job image's huggingface_hub pin (hack/images/job/requirements.txt), 1.33.0 until it exists."""
    path = REPO / "hack/images/job/requirements.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            m = re.fullmatch(r"huggingface[_-]hub==(\S+)", line.split("#", 1)[0].strip())
            if m:
                return m.group(1)
    return "1.33.0"


def hf_cli_of(version: str) -> str:
    """The hf CLI of one huggingface_hub release, in a venv cached under ~/.cache/lorarl/venvs/hf-cli-<version>."""
    return str(cached_venv(f"hf-cli-{version}", f"huggingface_hub=={version}", timeout=900) / "bin" / "hf")


@pytest.fixture(scope="module", params=["test-venv", "job-image"])
def hf_cli(request):
    """Both CLIs lorarl meets: the test venv's (2.x) and the job image's (its pin)."""
    return VENV_HF if request.param == "test-venv" else hf_cli_of(image_hf_version())


@pytest.fixture
def hub(tmp_path):
    root = tmp_path / "hub"
    hubstub.make_seed_repos(str(root))
    hubstub.write_repo(str(root), "org/private-model", {"config.json": "{}", "weights.bin": b"\0" * 100}, token=TOKEN)
    hubstub.write_repo(str(root), "org/gated-model", {"config.json": "{}"}, token=TOKEN, gated=True)
    big = os.urandom(3 << 20)
    hubstub.write_repo(str(root), "org/lfs-model", {"big.bin": big, "nested/dir/small.txt": "small"})
    commit = "0123456789abcdef0123456789abcdef01234567"
    hubstub.write_repo(str(root), hubstub.SEED_MODEL, {"config.json": '{"pinned": true}'}, revision=commit)
    with hubstub.HubStub(str(root), lfs_threshold=1 << 20, page_size=2) as server:
        server.big, server.commit = big, commit
        yield server


def hf(cli, hub, tmp_path, *args, token=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1", NO_COLOR="1")
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([cli, "download", *args], env=env, capture_output=True, text=True, timeout=120)


def files(d: pathlib.Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and ".cache" not in p.parts}


def test_model_and_dataset_with_and_without_revision(hub, tmp_path, hf_cli):
    out = tmp_path / "m"
    assert hf(hf_cli, hub, tmp_path, hubstub.SEED_MODEL, "--local-dir", str(out)).returncode == 0
    assert sorted(files(out)) == ["config.json", "generation_config.json", "model.safetensors", "standin.json", "tokenizer_config.json"]
    pinned = tmp_path / "pinned"
    result = hf(hf_cli, hub, tmp_path, hubstub.SEED_MODEL, "--revision", hub.commit, "--local-dir", str(pinned))
    assert result.returncode == 0, result.stderr
    assert files(pinned) == {"config.json": b'{"pinned": true}'}
    ds = tmp_path / "d"
    assert hf(hf_cli, hub, tmp_path, "--repo-type", "dataset", hubstub.SEED_EVAL, "--revision", "main", "--local-dir", str(ds)).returncode == 0
    assert list(files(ds)) == ["aime-2024.jsonl"] and len(files(ds)["aime-2024.jsonl"].splitlines()) == 30


def test_lfs_redirect_and_paginated_tree(hub, tmp_path, hf_cli):
    out = tmp_path / "lfs"
    result = hf(hf_cli, hub, tmp_path, "org/lfs-model", "--local-dir", str(out))
    assert result.returncode == 0, result.stderr
    assert files(out) == {"big.bin": hub.big, "nested/dir/small.txt": b"small"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["org/nope"], "Model 'org/nope' not found."),
        ([hubstub.SEED_MODEL, "--revision", "v9"], "Revision not found in model 'Qwen/Qwen3-4B'."),
        (["--repo-type", "dataset", hubstub.SEED_MODEL], "Dataset 'Qwen/Qwen3-4B' not found."),
    ],
)
def test_unknown_repo_or_revision_fails_with_hfs_own_error(hub, tmp_path, hf_cli, args, message):
    result = hf(hf_cli, hub, tmp_path, *args, "--local-dir", str(tmp_path / "x"))
    assert result.returncode == 1 and message in result.stderr


def test_a_private_repo_needs_the_token(hub, tmp_path, hf_cli):
    anonymous = hf(hf_cli, hub, tmp_path, "org/private-model", "--local-dir", str(tmp_path / "a"))
    assert anonymous.returncode == 1 and "Model 'org/private-model' not found." in anonymous.stderr
    wrong = hf(hf_cli, hub, tmp_path, "org/private-model", "--local-dir", str(tmp_path / "b"), token="hf_wrong")
    assert wrong.returncode == 1 and "Invalid credentials in Authorization header" in wrong.stderr
    right = hf(hf_cli, hub, tmp_path, "org/private-model", "--local-dir", str(tmp_path / "c"), token=TOKEN)
    assert right.returncode == 0 and sorted(files(tmp_path / "c")) == ["config.json", "weights.bin"]
    assert TOKEN not in anonymous.stderr + wrong.stderr + right.stderr + right.stdout


def test_a_gated_repo(hub, tmp_path, hf_cli):
    result = hf(hf_cli, hub, tmp_path, "org/gated-model", "--local-dir", str(tmp_path / "g"))
    assert result.returncode == 1
    assert hf(hf_cli, hub, tmp_path, "org/gated-model", "--local-dir", str(tmp_path / "h"), token=TOKEN).returncode == 0


def status(hub, path: str, method: str = "GET", headers: dict | None = None) -> tuple:
    req = urllib.request.Request(hub.endpoint + path, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


@pytest.mark.parametrize(
    "path",
    [
        "/Qwen/Qwen3-4B/resolve/main/..%2F..%2F..%2Fdatasets%2Fzhuzilin%2Faime-2024%2Fmain%2Faime-2024.jsonl",
        "/Qwen/Qwen3-4B/resolve/main/%2Fetc%2Fpasswd",
        "/api/models/Qwen/Qwen3-4B/tree/main/..%2F..",
        "/api/models/Qwen/..%2F..%2Fdatasets/revision/main",
    ],
)
def test_path_traversal_is_refused(hub, path):
    code, _ = status(hub, path)
    assert code in (400, 404) and code != 200


def test_resolve_headers(hub):
    code, headers = status(hub, "/Qwen/Qwen3-4B/resolve/main/config.json", "HEAD")
    assert code == 200 and len(headers["X-Repo-Commit"]) == 40 and headers["ETag"].startswith('"')
    code, headers = status(hub, "/Qwen/Qwen3-4B/resolve/main/missing.txt", "HEAD")
    assert code == 404 and headers["X-Error-Code"] == "EntryNotFound" and "X-Repo-Commit" in headers
    # a resumed download asks for the rest (file_download.py:371-378 of huggingface_hub 2.4.0)
    code, headers = status(hub, "/Qwen/Qwen3-4B/resolve/main/config.json", headers={"Range": "bytes=10-"})
    size = len((pathlib.Path(hub.hub.root) / "models/Qwen/Qwen3-4B/main/config.json").read_bytes())
    assert code == 206 and headers["Content-Range"] == f"bytes 10-{size - 1}/{size}"
    assert headers["Content-Length"] == str(size - 10)


def test_prepare_sh_downloads_the_seed_inputs_for_the_trainer(hub, tmp_path, hf_cli):
    """The real prepare.sh (run by /bin/sh, as the init container runs it) with HF_ENDPOINT at the
    stand-in: the seed's three inputs land where the rendered train.py flags point, and the
    trainer stand-in reads them."""
    job = job_from(seed_doc())
    args = mapped(render.downloads(job), tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        PATH=f"{os.path.dirname(hf_cli)}:{os.environ['PATH']}",
        HF_ENDPOINT=hub.endpoint,
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        LORARL_RUN_DIR=str(tmp_path / "root/shared_data/job"),
    )
    result = subprocess.run(["/bin/sh", str(render.asset_path("prepare.sh")), *args], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "prepare: all inputs present" in result.stdout
    argv = mapped(rendered_argv(), tmp_path)
    model = pathlib.Path(argv[argv.index("--hf-checkpoint") + 1])
    assert (model / "config.json").is_file() and (model / "standin.json").is_file()
    assert pathlib.Path(argv[argv.index("--prompt-data") + 1]).is_file()
    assert pathlib.Path(argv[argv.index("--eval-prompt-data") + 2]).is_file()
    run = run_trainer(argv + ["--num-rollout", "2"])
    assert run.returncode == 0, run.stderr[-3000:]
    assert "rollout 1: {" in run.stderr and "eval 0: {'eval/aime24'" in run.stderr
