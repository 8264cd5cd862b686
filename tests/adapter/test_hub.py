"""Export to the Hub stand-in and pull back, through the CLI as the export pod and a user run
it: the real huggingface_hub client (create_commit: preupload, LFS batch, upload, commit) makes
one commit; the real ``hf download`` of that commit reads the same bytes; ``lorarl adapter pull
hf://...`` verifies the digests. The token never appears in what they print, the termination
message or the stand-in's access log."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest
from lorarl.api import types as api
from lorarl.job import export_plan
from lorarl_dev import hubstub

from tests.adapter import saves

# starts the Hub stand-in: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

pytest.importorskip("huggingface_hub")

SENTINEL_TOKEN = "hf_export21_sentinel_token_do_not_print"
READ_ONLY_TOKEN = "hf_export21_read_only_token"
REPO_ID = "team/tiny-lora"
CLI = [sys.executable, "-m", "lorarl.cli"]
FILES = ["adapter_config.json", "adapter_model.safetensors", "lorarl-adapter.json"]


@pytest.fixture
def hub(tmp_path):
    root = tmp_path / "hub"
    hubstub.write_repo(str(root), REPO_ID, {"README.md": "# tiny-lora\n"}, write_tokens=(SENTINEL_TOKEN,), read_tokens=(READ_ONLY_TOKEN,))
    log = open(tmp_path / "hub.log", "w+")
    server = subprocess.Popen([sys.executable, "-m", "lorarl_dev.hubstub", "--root", str(root), "--verbose"], stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        endpoint = server.stdout.readline().strip().rsplit(" ", 1)[-1]
        yield endpoint, tmp_path / "hub.log"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1", **extra})
    return env


def _export(tmp_path, endpoint, token, repo=REPO_ID):
    doc = saves.tiny_job_doc(export={"destinations": [{"hub": {"repo": repo, "endpoint": endpoint, "tokenSecretRef": {"name": "hub-rw", "key": "token"}}}]})
    (tmp_path / "status.json").write_text(json.dumps(saves.STATUS))
    (tmp_path / "plan.json").write_text(json.dumps(export_plan.export_plan(api.LoraRLJob.model_validate(doc))))
    (tmp_path / "checkpoints").mkdir(exist_ok=True)
    saves.write_save(str(tmp_path / "checkpoints"), 99)
    # the export pod's environment for a hub destination (lorarl.job.export_job._env)
    env = _env(HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HOME=str(tmp_path / "hf-home"), LORARL_EXPORT_0_HF_TOKEN=token)
    term = tmp_path / "termination-log"
    args = ["adapter", "export", "--plan", str(tmp_path / "plan.json"), "--status", str(tmp_path / "status.json")]
    args += ["--save-root", str(tmp_path / "checkpoints"), "--termination-log", str(term)]
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=180)
    assert term.exists(), done.stderr[-3000:]
    return done, term.read_text()


def test_export_to_the_hub_as_one_commit_and_pull_back_verified(tmp_path, hub):
    endpoint, log = hub
    done, term = _export(tmp_path, endpoint, SENTINEL_TOKEN)
    assert done.returncode == 0, done.stderr
    adapter = json.loads(term)["adapter"]
    m = re.fullmatch(rf"hf://{REPO_ID}@([0-9a-f]{{40}})", adapter["uri"])
    assert m, adapter["uri"]
    commit = m.group(1)

    # the real hf CLI reads the commit: the three files at the repo's root, beside what was there
    hf = os.path.join(os.path.dirname(sys.executable), "hf")
    got = tmp_path / "hf-download"
    dl = subprocess.run(
        [hf, "download", REPO_ID, "--revision", commit, "--local-dir", str(got)],
        env=_env(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "dl-home")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dl.returncode == 0, dl.stderr
    assert sorted(p.name for p in got.iterdir() if p.name != ".cache") == ["README.md", *FILES]
    manifest = (got / "lorarl-adapter.json").read_bytes()
    assert "sha256:" + hashlib.sha256(manifest).hexdigest() == adapter["digest"]

    # lorarl adapter pull of the status URI: every digest verified, the same bytes
    pull_env = _env(HF_ENDPOINT=endpoint, HF_TOKEN=READ_ONLY_TOKEN, HF_HOME=str(tmp_path / "pull-home"), HF_HUB_DISABLE_PROGRESS_BARS="1")
    target = tmp_path / "pulled"
    pulled = subprocess.run(
        [*CLI, "adapter", "pull", adapter["uri"], str(target), "--digest", adapter["digest"]], env=pull_env, capture_output=True, text=True, timeout=120
    )
    assert pulled.returncode == 0, pulled.stderr
    assert "2 files verified, rollout 99" in pulled.stdout
    assert {p.name: p.read_bytes() for p in target.iterdir()} == {n: (got / n).read_bytes() for n in FILES}

    # a wrong expected digest: refused, nothing kept
    wrong = subprocess.run(
        [*CLI, "adapter", "pull", adapter["uri"], str(tmp_path / "wrong"), "--digest", "sha256:" + "0" * 64],
        env=pull_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 1 and "lorarl-adapter.json: digest" in wrong.stderr
    assert not (tmp_path / "wrong").exists()
    for text in (done.stdout, done.stderr, term, pulled.stdout, pulled.stderr, log.read_text()):
        assert SENTINEL_TOKEN not in text


@pytest.mark.parametrize(
    ("token", "repo", "expected"),
    [
        (READ_ONLY_TOKEN, REPO_ID, "HTTP 403 (the token may not write there)"),
        ("hf_unknown_token", REPO_ID, "HTTP 401 (the token is missing or invalid)"),
        (SENTINEL_TOKEN, "team/no-such-repo", "HTTP 404 (RepoNotFound)"),
    ],
)
def test_a_refusing_hub_is_reported_with_its_code_and_no_token(tmp_path, hub, token, repo, expected):
    endpoint, log = hub
    done, term = _export(tmp_path, endpoint, token, repo=repo)
    assert done.returncode == 1
    report = json.loads(term)
    assert report["reason"] == "DestinationFailed", report
    assert report["message"].startswith("spec.export.destinations[0]: committing to hf://") and expected in report["message"], report
    for text in (done.stdout, done.stderr, term, log.read_text()):
        assert token not in text
