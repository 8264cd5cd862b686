"""The package's layering, checked from outside the code it constrains."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator

# what `lorarl run` imports before it serves (cli.run: the kopf handlers, then the runtime)
RUN_ENTRY = ("lorarl.cli", "lorarl.controller", "lorarl.runtime.runner", "lorarl.runtime.leader", "lorarl.runtime.probes")
VALIDATION_LIBRARIES = ("celpy", "jsonschema", "lorarl.admission")
TESTS = pathlib.Path(__file__).resolve().parent


def test_the_controller_imports_no_validation_library():
    """The lenient read of an admitted object needs neither CEL nor JSON Schema nor the CRD
    generator: only `lorarl validate` does."""
    code = f"import importlib, json, sys\nfor m in {RUN_ENTRY!r}: importlib.import_module(m)\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    assert "lorarl.control.reconcile" in loaded, "the entry did not import the reconcile: the check proves nothing"
    bad = [m for m in loaded if m.split(".")[0] in VALIDATION_LIBRARIES or m.startswith(VALIDATION_LIBRARIES)]
    assert not bad, f"the controller's process imports {bad}"


def _imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{a.name}") for a in node.names)


def test_no_test_module_imports_another():
    """Helpers live in helper modules (tests/helpers.py, the lorarl_dev plugin, a suite's own
    helper module), so that a test module is only ever collected, never imported."""
    offenders = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for line, module in _imported_modules(ast.parse(path.read_text())):
            if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_"):
                offenders.append(f"{path.relative_to(TESTS.parent)}:{line} imports {module}")
    assert not offenders, "\n".join(offenders)
