"""What a control plane leaves when its owner is killed, and the order its children stop in."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import tempfile

from lorarl_dev.node import realnode
from lorarl_dev.processes import pid_alive, pid_is

#: The order processes are stopped in (reverse of start order).
STOP_ORDER = (
    "crane",  # the export tests' OCI registry (seedrun.start_registry)
    "moto_server",  # the export tests' S3 server (seedrun.start_s3)
    "hubstub",
    "argocd-application-controller",
    "argocd-relay",  # the application controller's way out of its namespace
    "argocd-repo-server",
    "redis-server",  # Argo CD's cache
    "kustomize-controller",
    "source-controller",
    "kueue",
    "kuberay-operator",
    "kwok",
    "fakegpu",
    "coredns",
    "kube-proxy",
    "kubelet",
    "containerd",
    "kube-scheduler",
    "kube-controller-manager",
    "relay",
    "kube-apiserver",
    "etcd",
)


def sweep_stale_workdirs(parent: str | os.PathLike[str] | None = None) -> list[pathlib.Path]:
    """Remove temporary ``lorarl-cp-*`` workdirs whose processes are all gone.

    Such a directory (about 120 MB, mostly etcd's preallocated WAL) is left
    only when the process that owned it was SIGKILLed; its children died with
    it (PR_SET_PDEATHSIG) but nothing could remove the files. A directory
    without ``pids.json`` is never touched (it may be starting up).
    """
    removed = []
    for d in pathlib.Path(parent or tempfile.gettempdir()).glob("lorarl-cp-*"):
        try:
            pids = json.loads((d / "pids.json").read_text())
        except (OSError, ValueError):
            continue
        if any(pid_alive(int(pid)) and pid_is(int(pid), name) for name, pid in pids.items()):
            continue
        # mounts, cgroups and namespaces of a killed real node first
        with contextlib.suppress(OSError, ValueError):
            if json.loads(realnode.RECORD.read_text()).get("workdir") == str(d):
                realnode.sweep()
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed
