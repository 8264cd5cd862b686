"""Shared helpers of the stand-in tests: the rendered train.py commands, mapped onto a scratch
directory, and the trainer stand-in run as the job runs it (``python3 /root/miles/train.py ...``)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from lorarl.job import command
from lorarl.reporter import logparse
from lorarl_dev import hubstub

from tests.helpers import MANIFESTS, REPO, job_from, load

MILES = REPO / "hack/images/job/miles"
TRAIN_PY = MILES / "train.py"
MANIFEST_NAMES = ("qwen3-4b-lora-amd", "mi300x-2node", "h200", "kueue")


def miles_options():
    """The trainer stand-in's ``options`` module: miles' train.py parser rebuilt from its dump."""
    if str(MILES) not in sys.path:
        sys.path.insert(0, str(MILES))
    from miles_standin import options

    return options


def rendered_argv(name: str = "qwen3-4b-lora-amd") -> list[str]:
    """train.py's arguments as lorarl renders them for manifests/<name>.yaml."""
    argv = command.train_argv(job_from(load(MANIFESTS / f"{name}.yaml")))
    assert argv[:2] == ["python3", "/root/miles/train.py"], argv[:2]
    return argv[2:]


def mapped(argv: list[str], tmp: pathlib.Path) -> list[str]:
    """/root/... paths of the rendered command moved under tmp (the pod's volume)."""
    return [str(tmp / a.lstrip("/")) if a.startswith("/root/") else a for a in argv]


def seed_inputs(tmp: pathlib.Path, knobs: dict | None = None) -> list[str]:
    """The seed's inputs where its rendered flags point (as prepare.sh leaves them), and the
    rendered command pointing at them."""
    repos = hubstub.make_seed_repos(str(tmp / "hub"), knobs={"seconds_per_rollout": 0} if knobs is None else knobs)
    argv = mapped(rendered_argv(), tmp)
    for repo, target in (
        (hubstub.SEED_MODEL, argv[argv.index("--hf-checkpoint") + 1]),
        (hubstub.SEED_PROMPTS, os.path.dirname(argv[argv.index("--prompt-data") + 1])),
        (hubstub.SEED_EVAL, os.path.dirname(argv[argv.index("--eval-prompt-data") + 2])),
    ):
        pathlib.Path(target).parent.mkdir(parents=True, exist_ok=True)
        os.rename(repos[repo], target)
    return argv


def run_trainer(argv: list[str], *, inline: bool = True, env: dict | None = None, timeout: float = 120, **popen) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    if inline:
        full_env["MILES_STANDIN_EXECUTOR"] = "inline"
    return subprocess.run([sys.executable, str(TRAIN_PY), *argv], env=full_env, capture_output=True, text=True, timeout=timeout, **popen)


def events(text: str) -> list:
    """The reporter's own parser over the log: the oracle for miles' line formats."""
    return [e for e in map(logparse.parse_line, text.splitlines()) if e is not None]


def of_kind(evs: list, kind: str) -> list:
    return [e for e in evs if e.kind == kind]
