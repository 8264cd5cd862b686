"""A tier whose real parts cannot start stops with one line naming what is missing, not with the
same traceback from every test that needs them (lorarl_dev.pytest_plugin.started)."""

from __future__ import annotations

import os
import subprocess
import sys

TWO_TESTS = """
def test_one(control_plane):
    pass

def test_two(kube_api):
    pass
"""


def test_a_control_plane_that_cannot_start_stops_the_run_with_one_line(tmp_path):
    (tmp_path / "test_needs_cp.py").write_text(TWO_TESTS)
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "lorarl_dev.pytest_plugin", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "LORARL_CONTROLPLANE_BIN_DIR": str(empty)},
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    lines = [line for line in out.splitlines() if "could not start" in line]
    assert len(lines) == 1, out
    assert "the control plane could not start" in lines[0] and "lacks etcd" in lines[0], lines[0]
    assert "Traceback" not in out and "test_two" not in out, out
