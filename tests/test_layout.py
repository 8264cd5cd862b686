"""The package's layering, checked from outside the code it constrains."""

from __future__ import annotations

import json
import subprocess
import sys

# what `lorarl run` imports before it serves (cli.run: the kopf handlers, then the runtime)
RUN_ENTRY = ("lorarl.cli", "lorarl.controller", "lorarl.runtime.runner", "lorarl.runtime.leader", "lorarl.runtime.probes")
VALIDATION_LIBRARIES = ("celpy", "jsonschema", "lorarl.admission")


def test_the_controller_imports_no_validation_library():
    """The lenient read of an admitted object needs neither CEL nor JSON Schema nor the CRD
    generator: only `lorarl validate` does."""
    code = (f"import importlib, json, sys\nfor m in {RUN_ENTRY!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    assert "lorarl.control.reconcile" in loaded, "the entry did not import the reconcile: the check proves nothing"
    bad = [m for m in loaded if m.split(".")[0] in VALIDATION_LIBRARIES or m.startswith(VALIDATION_LIBRARIES)]
    assert not bad, f"the controller's process imports {bad}"
