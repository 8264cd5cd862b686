"""Locate KubeRay's own CRDs in the Go module cache (never hand-written, never committed)."""

from __future__ import annotations

import os
import pathlib

from . import gomodules

KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
# the one place the version is written: hack/controlplane/kuberay/go.mod (the operator binary is
# built from it by build.sh, and its CRDs are read here from the same module version)
_GO_MOD = pathlib.Path(__file__).resolve().parents[2] / "controlplane" / "kuberay" / "go.mod"


def _go_mod_version() -> str:
    for line in _GO_MOD.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[:2] == ["require", KUBERAY_MODULE] and len(words) >= 3:
            return words[2]
    raise RuntimeError(f"{_GO_MOD}: no `require {KUBERAY_MODULE} vX` line")


KUBERAY_VERSION = os.environ.get("LORARL_KUBERAY_VERSION") or _go_mod_version()

_CRD_FILES = {
    "RayJob": "ray.io_rayjobs.yaml",
    "RayCluster": "ray.io_rayclusters.yaml",
    "RayService": "ray.io_rayservices.yaml",
}


def kuberay_module_dir(version: str = KUBERAY_VERSION) -> pathlib.Path:
    """The KubeRay ray-operator module's directory (downloaded once)."""
    return gomodules.module_dir(KUBERAY_MODULE, version)


def kuberay_crd_path(kind: str, version: str = KUBERAY_VERSION) -> pathlib.Path:
    """Path of KubeRay's CRD YAML for ``kind`` (RayJob, RayCluster, RayService)."""
    path = kuberay_module_dir(version) / "config" / "crd" / "bases" / _CRD_FILES[kind]
    if not path.is_file():
        raise FileNotFoundError(path)
    return path
