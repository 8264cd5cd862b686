"""A Go module's source from the module proxy, through the go command's own cache: where the
harness reads other projects' files it must not copy (KubeRay's and Kueue's CRDs, the
prometheus-operator's ServiceMonitor CRD)."""

from __future__ import annotations

import functools
import json
import pathlib
import subprocess


@functools.cache
def module_dir(module: str, version: str) -> pathlib.Path:
    """Download (or reuse) ``module@version`` and return its directory in the module cache."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=pathlib.Path.home(),  # outside any module, so no go.mod is touched
    )
    info = json.loads(out.stdout)
    if info.get("Error"):
        raise RuntimeError(f"go mod download {module}@{version}: {info['Error']}")
    return pathlib.Path(info["Dir"])
