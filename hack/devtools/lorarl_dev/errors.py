"""The errors of the development tool, shared by the control plane, its node and its helpers."""

from __future__ import annotations

import subprocess


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started, or reached."""


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call; ``str()`` includes its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr:\n{self.stderr}"
