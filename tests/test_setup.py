"""`make setup` prints no warning box: its own pip command (read from `make -n`), run into a fresh
venv without dependencies (the two editable installs are what printed setuptools' box)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

# starts `make setup` into a new venv: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers


def test_make_setup_prints_no_warning_box(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    dry = subprocess.run(["make", "-n", "-B", "setup", f"VENV={venv}"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    install = next(line for line in dry.splitlines() if " install --quiet -e " in line)
    upgrade = next(line for line in dry.splitlines() if "--upgrade pip" in line)  # a new pip shows the build backend's warnings
    subprocess.run(upgrade, shell=True, check=True, timeout=600)
    out = subprocess.run(f"{install} --no-deps", shell=True, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "!!" not in out.stderr + out.stdout and "Warning" not in out.stderr, out.stderr
