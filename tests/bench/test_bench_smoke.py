"""The benchmark runs from its one command and produces its page (a smoke run: tiny N, no
duration asserted). The ceiling's requests are known by construction (six applies, one status
patch, one Event per job), so they check that the bench counts requests from the audit log."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.controlplane


def test_quick_bench_writes_its_table(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--jobs",
            "5",
            "--systems",
            "ours,ceiling",
            "--phases",
            "burst",
            "--rounds",
            "2",
            "--out",
            str(tmp_path),
            "--no-plot",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "benchmarks.md").read_text()
    assert "**Burst, N = 5**" in page and "| jobs/s |" in page
    assert "| seconds, every round" in page  # a small burst runs in rounds; the median run is reported
    assert "[met] N=5: each child written once" in proc.stdout or "[NOT MET] N=5: each child written once" in proc.stdout
    results = json.loads((tmp_path / "benchmarks.json").read_text())
    ceiling = results["burst"]["5"]["ceiling"]
    assert len(ceiling["runs_seconds"]) == 2 and ceiling["seconds"] == max(ceiling["runs_seconds"])
    assert ceiling["by_verb"] == {
        "create events": 5,
        "patch configmaps": 5,
        "patch lorarljobs/status": 5,
        "patch networkpolicies": 5,
        "patch persistentvolumeclaims": 5,
        "patch rayjobs": 5,
        "patch rolebindings": 5,
        "patch roles": 5,
        "patch serviceaccounts": 5,
    }
    ours = results["burst"]["5"]["ours"]
    # every job reconciled: each child applied by the operator's own identity
    assert all(ours["by_verb"].get(f"patch {r}", 0) >= 5 for r in ("serviceaccounts", "configmaps", "rayjobs"))
    assert results["errors"] == []
