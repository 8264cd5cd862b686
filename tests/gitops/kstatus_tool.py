"""Run the real kstatus library (hack/kstatus: sigs.k8s.io/cli-utils v0.37.2 status.Compute)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from lorarl_dev.binaries import ensure_binaries


def kstatus(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    """kstatus's {status, message} for each object, in order (builds the tool once, ~1 min cold)."""
    binary = ensure_binaries(["kstatus"]) / "kstatus"
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    out = subprocess.run([str(binary)], input=doc, capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    return [{"status": r["status"], "message": r["message"]} for r in json.loads(out.stdout)]
