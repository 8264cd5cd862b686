"""Locate KubeRay's own CRDs in the Go module cache (never hand-written, never committed)."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess

KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY_VERSION = os.environ.get("LORARL_KUBERAY_VERSION", "v1.5.0")

_CRD_FILES = {
    "RayJob": "ray.io_rayjobs.yaml",
    "RayCluster": "ray.io_rayclusters.yaml",
    "RayService": "ray.io_rayservices.yaml",
}


@functools.cache
def kuberay_module_dir(version: str = KUBERAY_VERSION) -> pathlib.Path:
    """Download (or reuse) the KubeRay ray-operator module and return its directory."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{KUBERAY_MODULE}@{version}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=pathlib.Path.home(),  # outside any module, so no go.mod is touched
    )
    info = json.loads(out.stdout)
    if info.get("Error"):
        raise RuntimeError(f"go mod download {KUBERAY_MODULE}@{version}: {info['Error']}")
    return pathlib.Path(info["Dir"])


def kuberay_crd_path(kind: str, version: str = KUBERAY_VERSION) -> pathlib.Path:
    """Path of KubeRay's CRD YAML for ``kind`` (RayJob, RayCluster, RayService)."""
    path = kuberay_module_dir(version) / "config" / "crd" / "bases" / _CRD_FILES[kind]
    if not path.is_file():
        raise FileNotFoundError(path)
    return path
