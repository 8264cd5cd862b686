"""The chart's dashboard JSON is what hack/observability/dashboard.py generates (make generate),
and every panel queries something."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO


def test_the_dashboard_file_is_the_generated_one():
    out = subprocess.run([sys.executable, str(REPO / "hack" / "observability" / "dashboard.py")], capture_output=True, text=True, check=True, timeout=60)
    shipped = (REPO / "charts" / "lorarl-operator" / "files" / "dashboard.json").read_text()
    assert out.stdout == shipped, "charts/lorarl-operator/files/dashboard.json is stale: run make generate"
    panels = [p for p in json.loads(shipped)["panels"] if p["type"] != "row"]
    assert len(panels) == 16 and all(p["targets"] and all(t["expr"] for t in p["targets"]) for p in panels)
    assert len({p["id"] for p in json.loads(shipped)["panels"]}) == len(json.loads(shipped)["panels"])
