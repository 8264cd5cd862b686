"""Virtualenvs of pinned tools the tests run beside the project's own (moto, checkov, the export
pod's store libraries, an hf CLI of one release), built once from PyPI and cached under
``~/.cache/lorarl/venvs/<name>``: one per name, so a name carries the version or the hash of what
it holds.

The api and e2e tiers run side by side, each may need the same venv first on a cold machine: a
lock makes one build it while the other waits, and a stamp written last marks it whole."""

from __future__ import annotations

import fcntl
import pathlib
import shutil
import subprocess
import sys

from lorarl_dev.locations import cache_root


def cached_venv(name: str, *pip_args: str, timeout: float = 1800) -> pathlib.Path:
    """The venv ``name`` holding what ``pip install *pip_args`` installs; its directory."""
    venv = cache_root() / "venvs" / name
    stamp = venv / ".installed"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not stamp.exists():
            shutil.rmtree(venv, ignore_errors=True)  # a build that was killed half-way
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            subprocess.run([str(venv / "bin/python3"), "-m", "pip", "install", "--quiet", *pip_args], check=True, timeout=timeout)
            stamp.touch()
    return venv
