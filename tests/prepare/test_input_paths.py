"""Input directories on a shared volume: one per (repository, revision), never shared by two.

Jobs on one ``existingClaim`` see the same /root/models and /root/datasets; a directory named
by the repository's last path part alone let ``org1/math`` and ``org2/math`` (or two revisions
of one model) overwrite each other's files. The oracle here is a decoder written from the
layout's description, independent of ``lorarl.job.command``.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse

from hypothesis import example, given, settings
from hypothesis import strategies as st
from lorarl.api import types as api
from lorarl.job import command, paths, render

from tests.helpers import job_from, with_spec

SEGMENT_MAX = 255  # NAME_MAX of Linux file systems, in bytes


def decode(root: str, path: str) -> tuple[str, str]:
    """The documented layout read back: <root>/<org>/<name>/<percent-encoded revision>."""
    rest = path.removeprefix(root + "/")
    assert rest != path, f"{path} is not under {root}"
    org, name, rev = rest.split("/")
    return f"{org}/{name}", urllib.parse.unquote(rev)


def test_same_name_in_two_organisations_gets_two_directories():
    job = job_from(with_spec(rollout={"promptData": {"repo": "org1/math"}}, eval={"enabled": True, "datasets": [{"name": "math", "repo": "org2/math"}]}))
    prompt = dict(command.train_blocks(job))["rollout"][1]
    evaluated = dict(command.train_blocks(job))["eval"][4]
    assert prompt == "/root/datasets/org1/math/main/math.jsonl"
    assert evaluated == "/root/datasets/org2/math/main/math.jsonl"
    args = render.downloads(job)
    assert [args[i : i + 4] for i in range(4, len(args), 4)] == [
        ["dataset", "org1/math", "/root/datasets/org1/math/main", ""],
        ["dataset", "org2/math", "/root/datasets/org2/math/main", ""],
    ]


def test_two_revisions_of_one_model_get_two_directories():
    dirs = {
        rev: paths.model_dir(job_from(with_spec(model={"name": "Qwen/Qwen3-4B", **({"revision": rev} if rev else {})})))
        for rev in (None, "main", "v2.0", "refs/pr/7", "1a2b3c4d")
    }
    assert dirs == {
        None: "/root/models/Qwen/Qwen3-4B/main",  # hf download's default revision is main
        "main": "/root/models/Qwen/Qwen3-4B/main",
        "v2.0": "/root/models/Qwen/Qwen3-4B/v2.0",
        "refs/pr/7": "/root/models/Qwen/Qwen3-4B/refs%2Fpr%2F7",
        "1a2b3c4d": "/root/models/Qwen/Qwen3-4B/1a2b3c4d",
    }


def test_two_eval_sets_of_one_repository_and_revision_download_once():
    sets = [{"name": "a", "repo": "zhuzilin/aime-2024", "file": "a.jsonl"}, {"name": "b", "repo": "zhuzilin/aime-2024", "file": "b.jsonl"}]
    args = render.downloads(job_from(with_spec(eval={"enabled": True, "datasets": sets})))
    assert args.count("/root/datasets/zhuzilin/aime-2024/main") == 1


repos = st.from_regex(api.HF_REPO_ID, fullmatch=True).filter(lambda r: 3 <= len(r) <= 96)
revisions = st.none() | st.from_regex(api.SHELL_SAFE, fullmatch=True).filter(lambda r: len(r) <= 64)


@example(root=paths.MODELS_DIR, repo="0/0", revision=".")  # found by the CI profile: the model's own directory
@example(root=paths.MODELS_DIR, repo="org/name", revision="..")  # its org's directory
@settings(max_examples=400, deadline=None)
@given(st.sampled_from([paths.MODELS_DIR, paths.DATASETS_DIR]), repos, revisions)
def test_every_allowed_repository_and_revision_has_its_own_directory(root, repo, revision):
    path = paths.input_dir(root, repo, revision)
    # injective: the directory names its repository and revision, so no two inputs share one
    assert decode(root, path) == (repo, revision or "main")
    # stays inside the root, one segment per part, no '.' or '..', within NAME_MAX
    assert posixpath.normpath(path) == path
    segments = path.removeprefix(root + "/").split("/")
    assert all(s not in (".", "..") and 0 < len(s.encode()) <= SEGMENT_MAX - len("@partial") for s in segments)
    # prepare.sh's sidecars <dir>@lock and <dir>@partial can never be another input's directory
    assert "@" not in segments[-1]
    # and the path is still one shell-inert command word
    assert re.fullmatch(api.SHELL_SAFE, path)


@settings(max_examples=200, deadline=None)
@given(repos, revisions, repos, revisions)
def test_different_inputs_never_share_a_directory(repo_a, rev_a, repo_b, rev_b):
    same_input = (repo_a, rev_a or "main") == (repo_b, rev_b or "main")
    same_dir = paths.input_dir(paths.DATASETS_DIR, repo_a, rev_a) == paths.input_dir(paths.DATASETS_DIR, repo_b, rev_b)
    assert same_dir == same_input
