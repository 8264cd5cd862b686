"""The Hub stand-in's upload path, driven by the real huggingface_hub client (the test venv's
2.x: ``HfApi.create_commit``, preupload, the LFS batch API, the NDJSON commit) and read back by
the real ``hf download``; what the Hub refuses is refused (the client's own errors), and a
hand-made request covers what the client never sends (an object never uploaded, wrong bytes)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest
from lorarl_dev import hubstub

# starts the Hub stand-in: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

WRITE_TOKEN = "hf_upload_sentinel_write_token_5678"
READ_TOKEN = "hf_upload_sentinel_read_token_4321"
REPO_ID = "org/adapter"

# The client's LFS path: huggingface_hub reads HF_HUB_DISABLE_XET once, at import (constants.py),
# and with hf_xet installed would upload through Xet storage, which the stand-in does not serve.
os.environ["HF_HUB_DISABLE_XET"] = "1"
huggingface_hub = pytest.importorskip("huggingface_hub")
httpx2 = pytest.importorskip("httpx2")  # huggingface_hub 2.x's HTTP client, for the hand-made requests


@pytest.fixture
def client_env(monkeypatch, tmp_path):
    """No user token or cache; the subprocesses get Xet off too."""
    for key in list(os.environ):
        if key.startswith("HF_") and key != "HF_HUB_DISABLE_XET":
            monkeypatch.delenv(key)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@pytest.fixture
def hub(tmp_path, client_env):
    root = tmp_path / "hub"
    hubstub.write_repo(str(root), REPO_ID, {"README.md": "# adapter\n"}, write_tokens=(WRITE_TOKEN,), read_tokens=(READ_TOKEN,))
    with hubstub.HubStub(str(root), lfs_threshold=1 << 20) as server:
        yield server


def api(hub, token=WRITE_TOKEN):
    return huggingface_hub.HfApi(endpoint=hub.endpoint, token=token)


def adapter_files(d: pathlib.Path) -> dict:
    files = {"adapter_model.safetensors": os.urandom(3 << 20), "adapter_config.json": b'{"r": 8}', "lorarl-adapter.json": b'{"files": []}'}
    for name, data in files.items():
        (d / name).write_bytes(data)
    return files


def commit(hub, d: pathlib.Path, names, token=WRITE_TOKEN, **kw):
    ops = [huggingface_hub.CommitOperationAdd(path_in_repo=n, path_or_fileobj=str(d / n)) for n in names]
    return api(hub, token).create_commit(REPO_ID, operations=ops, commit_message="lorarl export", **kw)


def hf_download(hub, tmp_path, revision, out):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "dl-home"), HF_HUB_DISABLE_TELEMETRY="1", NO_COLOR="1")
    hf = os.path.join(os.path.dirname(sys.executable), "hf")
    return subprocess.run([hf, "download", REPO_ID, "--revision", revision, "--local-dir", str(out)], env=env, capture_output=True, text=True, timeout=120)


def tree(d: pathlib.Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and ".cache" not in p.parts}


def test_one_commit_with_an_lfs_file_is_downloadable_by_its_id(hub, tmp_path):
    (tmp_path / "up").mkdir()
    files = adapter_files(tmp_path / "up")
    before = api(hub).repo_info(REPO_ID).sha
    info = commit(hub, tmp_path / "up", files)
    assert len(info.oid) == 40 and info.oid != before
    assert api(hub).repo_info(REPO_ID).sha == info.oid  # the branch moved to the new commit
    lfs = hub.hub.lfs_path(hubstub.Repo(hub.hub.root, "models", REPO_ID), hashlib.sha256(files["adapter_model.safetensors"]).hexdigest())
    assert os.path.isfile(lfs)  # the safetensors went through the LFS batch API and the upload href
    done = hf_download(hub, tmp_path, info.oid, tmp_path / "new")
    assert done.returncode == 0, done.stderr
    assert tree(tmp_path / "new") == {"README.md": b"# adapter\n", **files}
    done = hf_download(hub, tmp_path, before, tmp_path / "old")  # the parent commit is still there
    assert done.returncode == 0, done.stderr
    assert tree(tmp_path / "old") == {"README.md": b"# adapter\n"}


def test_an_unchanged_file_is_left_out_and_a_stale_parent_is_refused(hub, tmp_path):
    (tmp_path / "up").mkdir()
    files = adapter_files(tmp_path / "up")
    first = commit(hub, tmp_path / "up", files)
    (tmp_path / "up" / "lorarl-adapter.json").write_bytes(b'{"files": [1]}')
    second = commit(hub, tmp_path / "up", files, parent_commit=first.oid)
    assert second.oid != first.oid
    assert commit(hub, tmp_path / "up", files).oid == second.oid  # nothing changed: no commit (preupload's oids)
    (tmp_path / "up" / "adapter_config.json").write_bytes(b'{"r": 16}')
    with pytest.raises(huggingface_hub.errors.HfHubHTTPError) as err:
        commit(hub, tmp_path / "up", ["adapter_config.json"], parent_commit=first.oid)
    assert err.value.response.status_code == 412


@pytest.mark.parametrize(
    ("token", "status", "error"),
    [
        (False, 401, "Invalid username or password."),
        ("hf_not_a_token_of_this_hub", 401, "Invalid credentials in Authorization header"),
        (READ_TOKEN, 403, f"You don't have the rights to create a commit on {REPO_ID}"),
    ],
)
def test_a_write_without_write_access_is_refused(hub, tmp_path, token, status, error):
    (tmp_path / "up").mkdir()
    names = list(adapter_files(tmp_path / "up"))
    before = api(hub).repo_info(REPO_ID).sha
    with pytest.raises(huggingface_hub.errors.HfHubHTTPError) as err:
        commit(hub, tmp_path / "up", names, token=token)
    assert err.value.response.status_code == status
    assert err.value.response.headers["X-Error-Message"] == error
    assert api(hub).repo_info(REPO_ID).sha == before


def test_a_missing_repo_or_branch_is_the_clients_not_found(hub, tmp_path):
    (tmp_path / "up").mkdir()
    names = list(adapter_files(tmp_path / "up"))
    ops = [huggingface_hub.CommitOperationAdd(path_in_repo=n, path_or_fileobj=str(tmp_path / "up" / n)) for n in names]
    with pytest.raises(huggingface_hub.errors.RepositoryNotFoundError):
        api(hub).create_commit("org/no-such-repo", operations=ops, commit_message="x")
    with pytest.raises(huggingface_hub.errors.RevisionNotFoundError):
        api(hub).create_commit(REPO_ID, operations=ops, commit_message="x", revision="no-such-branch")


def _post(hub, path, body, token=WRITE_TOKEN, content_type="application/json"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx2.post(hub.endpoint + path, content=data, headers={"Authorization": f"Bearer {token}", "Content-Type": content_type}, timeout=30)


def test_an_lfs_file_never_uploaded_or_uploaded_wrong_is_refused(hub):
    data = os.urandom(4096)
    oid = hashlib.sha256(data).hexdigest()
    header = {"key": "header", "value": {"summary": "x", "description": ""}}
    lfs_line = {"key": "lfsFile", "value": {"path": "adapter_model.safetensors", "algo": "sha256", "oid": oid, "size": len(data)}}
    ndjson = b"".join(json.dumps(x).encode() + b"\n" for x in (header, lfs_line))
    refused = _post(hub, f"/api/models/{REPO_ID}/commit/main", ndjson, content_type="application/x-ndjson")
    assert refused.status_code == 400 and "never uploaded" in refused.headers["X-Error-Message"]

    batch = _post(hub, f"/{REPO_ID}.git/info/lfs/objects/batch", {"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": len(data)}]})
    assert batch.status_code == 200
    actions = batch.json()["objects"][0]["actions"]
    wrong = httpx2.put(actions["upload"]["href"], content=os.urandom(4096), timeout=30)  # other bytes, same size
    assert wrong.status_code == 400
    verify = _post(hub, actions["verify"]["href"][len(hub.endpoint) :], {"oid": oid, "size": len(data)})
    assert verify.status_code == 404
    forged = httpx2.put(actions["upload"]["href"].replace("sig=", "sig=0"), content=data, timeout=30)
    assert forged.status_code == 403
    assert _post(hub, f"/api/models/{REPO_ID}/commit/main", ndjson, content_type="application/x-ndjson").status_code == 400

    assert httpx2.put(actions["upload"]["href"], content=data, timeout=30).status_code == 200
    assert _post(hub, actions["verify"]["href"][len(hub.endpoint) :], {"oid": oid, "size": len(data)}).status_code == 200
    done = _post(hub, f"/api/models/{REPO_ID}/commit/main", ndjson, content_type="application/x-ndjson")
    assert done.status_code == 200, done.text
    assert done.json()["commitOid"] == api(hub).repo_info(REPO_ID).sha
    again = _post(hub, f"/{REPO_ID}.git/info/lfs/objects/batch", {"operation": "upload", "transfers": ["basic"], "objects": [{"oid": oid, "size": len(data)}]})
    assert "actions" not in again.json()["objects"][0]  # stored: the client skips the upload


def test_a_path_leaving_the_repo_is_refused(hub):
    header = {"key": "header", "value": {"summary": "x", "description": ""}}
    for path in ("../escape", "/abs", "a/../../b", ".git/config"):
        line = {"key": "file", "value": {"path": path, "content": base64.b64encode(b"x").decode(), "encoding": "base64"}}
        ndjson = b"".join(json.dumps(x).encode() + b"\n" for x in (header, line))
        assert _post(hub, f"/api/models/{REPO_ID}/commit/main", ndjson, content_type="application/x-ndjson").status_code == 400, path


def test_the_access_log_has_no_token_or_signature(tmp_path, client_env):
    root = tmp_path / "hub"
    hubstub.write_repo(str(root), REPO_ID, {"README.md": "x"}, write_tokens=(WRITE_TOKEN,))
    server = subprocess.Popen(
        [sys.executable, "-m", "lorarl_dev.hubstub", "--root", str(root), "--verbose", "--lfs-threshold", "1024"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        endpoint = server.stdout.readline().strip().rsplit(" ", 1)[-1]
        (tmp_path / "up").mkdir()
        files = adapter_files(tmp_path / "up")
        ops = [huggingface_hub.CommitOperationAdd(path_in_repo=n, path_or_fileobj=str(tmp_path / "up" / n)) for n in files]
        info = huggingface_hub.HfApi(endpoint=endpoint, token=WRITE_TOKEN).create_commit(REPO_ID, operations=ops, commit_message="x")
        assert len(info.oid) == 40
    finally:
        server.terminate()
        _, log = server.communicate(timeout=30)
    assert "/preupload/main" in log and "objects/batch" in log and "/hubstub-lfs-upload/" in log and "/commit/main" in log
    assert WRITE_TOKEN not in log and "sig=" not in log
