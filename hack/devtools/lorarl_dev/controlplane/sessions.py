"""Detached control planes, which outlive the process that started them: ``lorarl-dev controlplane
up|down|env`` and the demo."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from lorarl_dev.controlplane.cluster import ControlPlane
from lorarl_dev.controlplane.leftovers import STOP_ORDER
from lorarl_dev.errors import ControlPlaneError
from lorarl_dev.locations import default_state_dir
from lorarl_dev.node import netns, realnode
from lorarl_dev.processes import kill_group, pid_alive, pid_is


def _state_dir(state_dir: str | os.PathLike[str] | None) -> pathlib.Path:
    return pathlib.Path(state_dir) if state_dir is not None else default_state_dir()


def up(
    state_dir: str | os.PathLike[str] | None = None, *, verbose: bool = True, extra_crds: Sequence[str | os.PathLike[str]] = (), **options: Any
) -> ControlPlane:
    """Start a control plane that outlives this process; reuse a healthy one already there.

    ``options`` go to :class:`ControlPlane` (``fake_nodes=``, ``kuberay_operator=``, ...)
    and only matter when a new control plane is started.
    """
    workdir = _state_dir(state_dir) / "controlplane"
    if (workdir / "state.json").is_file():
        try:
            cp = ControlPlane.attach(workdir)
        except (OSError, ValueError, KeyError):
            cp = None
        if cp is not None and cp.healthy():
            if extra_crds:
                cp.install_crds(extra_crds)
            return cp
        down(state_dir)
    cp = ControlPlane(workdir, detached=True, verbose=verbose, extra_crds=extra_crds, **options)
    cp._own_workdir = False
    return cp.start()


def down(state_dir: str | os.PathLike[str] | None = None) -> bool:
    """Stop a control plane started by :func:`up` and remove its state. True if one was running."""
    workdir = _state_dir(state_dir) / "controlplane"
    pids: Mapping[str, int] = {}
    for fname in ("pids.json", "state.json"):
        try:
            data = json.loads((workdir / fname).read_text())
        except (OSError, ValueError):
            continue
        pids = data.get("pids", data) if fname == "state.json" else data
        if pids:
            break
    was_running = any(pid_alive(int(p)) and pid_is(int(p), n) for n, p in pids.items())
    netns_name = None
    with contextlib.suppress(OSError, ValueError):
        netns_name = json.loads((workdir / "state.json").read_text()).get("netns")
    if netns_name:
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(realnode.RECORD.read_text())
            if record.get("netns") == netns_name:
                record["pids"] = {**record.get("pids", {}), **pids}
                realnode.teardown(record)  # the node, its pods, mounts and cgroups first
    for name in [n for n in pids if n not in STOP_ORDER] + list(STOP_ORDER):
        pid = pids.get(name)
        if pid is None:
            continue
        kill_group(int(pid), name)
    if netns_name:
        netns.delete(netns_name)
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(realnode.RECORD.read_text())
            if record.get("netns") == netns_name:
                realnode.release(record)
    shutil.rmtree(workdir, ignore_errors=True)
    return was_running


def env(state_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Environment for a control plane started by :func:`up` (KUBECONFIG etc.)."""
    workdir = _state_dir(state_dir) / "controlplane"
    if not (workdir / "state.json").is_file():
        raise ControlPlaneError(f"no control plane in {workdir}; run 'lorarl-dev controlplane up'")
    return ControlPlane.attach(workdir).env()
