"""The export pod's store libraries (botocore, oras, huggingface_hub) as the operator image has them: a venv of
their own made from hack/image/exporter-requirements.txt (the image's pins), cached by the file's
hash under ~/.cache/lorarl/venvs. Tests give our CLI one package of it through PYTHONPATH."""

from __future__ import annotations

import hashlib
import pathlib
import subprocess

from lorarl_dev.venvs import cached_venv

REQUIREMENTS = pathlib.Path(__file__).resolve().parents[3] / "hack/image/exporter-requirements.txt"


def python() -> pathlib.Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    return cached_venv(f"exporter-{digest}", "--no-deps", "-r", str(REQUIREMENTS)) / "bin/python3"


def package_dir(name: str) -> pathlib.Path:
    """Where the venv keeps package ``name`` (e.g. "oras")."""
    out = subprocess.run([str(python()), "-c", f"import {name}, os; print(os.path.dirname({name}.__file__))"], capture_output=True, text=True, check=True)
    return pathlib.Path(out.stdout.strip())
