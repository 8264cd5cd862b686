"""Where the source checkout and the caches are."""

from __future__ import annotations

import os
import pathlib


def repo_root() -> pathlib.Path:
    """The lorarl source checkout (``LORARL_REPO_ROOT`` overrides)."""
    override = os.environ.get("LORARL_REPO_ROOT")
    if override:
        return pathlib.Path(override).resolve()
    # hack/devtools/lorarl_dev/locations.py -> repo root
    return pathlib.Path(__file__).resolve().parents[3]


def controlplane_dir() -> pathlib.Path:
    """``hack/controlplane`` (the Go module and build script)."""
    return repo_root() / "hack" / "controlplane"


def cache_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("LORARL_CACHE") or pathlib.Path.home() / ".cache" / "lorarl")


def default_state_dir() -> pathlib.Path:
    """Where a detached control plane (``lorarl-dev controlplane up``) keeps its state."""
    return cache_root() / "run"


def module_child_env() -> dict[str, str]:
    """This process's environment with ``hack/devtools`` first on PYTHONPATH, for a child that runs
    ``python -m lorarl_dev...`` (the relays)."""
    devtools = str(pathlib.Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([devtools, os.environ.get("PYTHONPATH", "")])}
