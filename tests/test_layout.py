"""The package's layering, checked from outside the code it constrains."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

# what `lorarl run` imports before it serves (cli.run: the kopf handlers, then the runtime)
RUN_ENTRY = ("lorarl.cli", "lorarl.controller", "lorarl.runtime.runner", "lorarl.runtime.leader", "lorarl.runtime.probes")
VALIDATION_LIBRARIES = ("celpy", "jsonschema", "lorarl.admission")
TESTS = pathlib.Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "operator" / "lorarl"
DEVTOOLS = TESTS.parent / "hack" / "devtools" / "lorarl_dev"


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


def test_only_the_runner_speaks_to_kopf():
    """kopf runs the process (handlers, liveness, signals, log format); the seam to the
    operator's own informers, queue and leader election is one module (docs/architecture.md)."""
    importers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(module == "kopf" or module.startswith("kopf.") for _, module in _imported_modules(ast.parse(path.read_text())))
    )
    assert importers == ["runtime/runner.py"]


def test_no_test_module_imports_another():
    """Helpers live in helper modules (tests/helpers.py, the lorarl_dev plugin, a suite's own
    helper module), so that a test module is only ever collected, never imported."""
    offenders = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for line, module in _imported_modules(ast.parse(path.read_text())):
            if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_"):
                offenders.append(f"{path.relative_to(TESTS.parent)}:{line} imports {module}")
    assert not offenders, "\n".join(offenders)


def _children(package: pathlib.Path) -> set[str]:
    """A package's subpackages and top-level modules (the rooms of its layers)."""
    return {p.name for p in package.iterdir() if (p / "__init__.py").is_file()} | {p.stem for p in package.glob("*.py") if p.stem != "__init__"}


def _package_imports(package: pathlib.Path, root: pathlib.Path) -> dict[tuple[str, str], str]:
    """(child, child) -> the first import that makes the one import the other ("file:line"),
    read with ast from the source (every import, also those inside functions); ``package`` is a
    package's directory under ``root``, the directory on sys.path it is imported from."""
    children, edges = _children(package), {}
    prefix = package.relative_to(root).parts
    depth = len(prefix)
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        module = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        parent = module if rel.name == "__init__" else module[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(parent[: len(parent) - node.level + 1]) if node.level else ""
                mod = ".".join(x for x in (base, node.module) if x)
                targets = [mod, *(f"{mod}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                if tuple(parts[:depth]) == prefix and len(parts) > depth and parts[depth] in children and len(module) > depth and parts[depth] != module[depth]:
                    edges.setdefault((module[depth], parts[depth]), f"{path.relative_to(TESTS.parent)}:{node.lineno}")
    return edges


def _cycles(edges: dict[tuple[str, str], str]) -> list[tuple[list[str], list[str]]]:
    """Per strongly connected component of more than one node: its members and one cycle in it
    (a, b, ..., a), the shortest way back from its first member."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    reach = {n: _reachable(graph, n) for n in graph}
    found, seen = [], set()
    for node in sorted(graph):
        if node in seen or node not in reach[node]:
            continue
        component = {m for m in reach[node] if node in reach[m]}
        seen |= component
        path, here = [node], node
        while True:  # walk inside the component, the shortest way back to the start
            here = min((m for m in graph[here] if m in component), key=lambda m: (_distance(graph, m, node, component), m))
            path.append(here)
            if here == node:
                break
        found.append((sorted(component), path))
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    out, todo = set(), list(graph[start])
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo += graph[n]
    return out


def _distance(graph: dict[str, set[str]], start: str, goal: str, within: set[str]) -> int:
    frontier, steps, seen = {start}, 0, {start}
    while goal not in frontier:
        frontier = {m for n in frontier for m in graph[n] if m in within} - seen
        seen |= frontier
        steps += 1
    return steps


def test_the_cycle_finder_names_a_cycle():
    edges = {("job", "adapter"): "a:1", ("adapter", "job"): "b:2", ("control", "job"): "c:3", ("serving", "control"): "d:4", ("job", "serving"): "e:5"}
    assert _cycles(edges) == [(["adapter", "control", "job", "serving"], ["adapter", "job", "adapter"])]
    assert _cycles({("a", "b"): "x:1", ("b", "c"): "y:2"}) == []


def _named_cycles(edges: dict[tuple[str, str], str]) -> list[str]:
    return [
        f"{' -> '.join(path)} (in the loop of {', '.join(members)})\n"
        + "\n".join(f"    {a} -> {b}: {edges[a, b]}" for a, b in zip(path, path[1:], strict=False))
        for members, path in _cycles(edges)
    ]


def test_no_cycle_between_the_packages_of_lorarl():
    """Layers only point down (docs/architecture.md, "Layout"; `make lint` checks the layers
    themselves with import-linter, pyproject.toml [tool.importlinter]): no two of lorarl's
    subpackages or top-level modules import each other, directly or around a loop."""
    edges = _package_imports(PACKAGE, PACKAGE.parent)
    assert ("cli", "controller") in edges, "the import graph misses cli -> controller: the check proves nothing"
    cycles = _named_cycles(edges)
    assert not cycles, "package cycles in lorarl:\n" + "\n".join(cycles)


@pytest.mark.parametrize("package", [DEVTOOLS, *(p for p in sorted(DEVTOOLS.iterdir()) if (p / "__init__.py").is_file())], ids=lambda p: p.name)
def test_no_cycle_between_the_modules_of_lorarl_dev(package):
    """The same for the development tool and each of its subpackages (issue 37: the control
    plane, its node and the helpers beside them imported each other around a loop)."""
    edges = _package_imports(package, DEVTOOLS.parent)
    assert edges, f"no import between the modules of {package.name}: the check proves nothing"
    cycles = _named_cycles(edges)
    assert not cycles, f"import cycles in {package.name}:\n" + "\n".join(cycles)


def test_lorarl_never_imports_the_development_tool():
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line} imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, module in _imported_modules(ast.parse(path.read_text()))
        if module.split(".")[0] == "lorarl_dev"
    ]
    assert not offenders, "\n".join(offenders)
