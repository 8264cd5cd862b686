"""A Go module's source from the module proxy, through the go command's own cache: where the
harness reads other projects' files it must not copy (KubeRay's and Kueue's CRDs, the
prometheus-operator's ServiceMonitor CRD)."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess


@functools.cache
def module_dir(module: str, version: str, toolchain: str | None = None) -> pathlib.Path:
    """Download (or reuse) ``module@version`` and return its directory in the module cache;
    ``toolchain`` (e.g. ``go1.27.3``) for a module whose go.mod needs a newer Go than the machine's
    (the go command refuses to download it otherwise)."""
    env = {**os.environ, "GOTOOLCHAIN": toolchain} if toolchain else None
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=pathlib.Path.home(),  # outside any module, so no go.mod is touched
        env=env,
    )
    info = json.loads(out.stdout)
    if info.get("Error"):
        raise RuntimeError(f"go mod download {module}@{version}: {info['Error']}")
    return pathlib.Path(info["Dir"])
