"""Locate KubeRay's own CRDs in the Go module cache (never hand-written, never committed)."""

from __future__ import annotations

import os
import pathlib

from . import gomodules

KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_VERSION = os.environ.get("LORARL_KUBERAY_VERSION", "v1.5.0")

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
