"""hack/constraints-lowest.txt pins every runtime dependency at the bottom of its declared range
(the unit tier and two api tests run with them in .venv-lowest: hack/run-tiers.sh); under that venv, they are what is installed."""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.helpers import REPO


def runtime_requirements() -> dict[str, Requirement]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return {canonicalize_name(r.name): r for r in map(Requirement, deps)}


def lowest_pins() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "hack" / "constraints-lowest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_every_runtime_dependency_is_pinned_at_its_lower_bound():
    requirements, pins = runtime_requirements(), lowest_pins()
    assert set(pins) == set(requirements)
    for name, req in requirements.items():
        [lower] = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert pins[name] in req.specifier, f"{name}: {pins[name]} is outside {req.specifier}"
        # the pin is the lower bound, or its first release (kubernetes>=30 -> 30.1.0: there is no 30.0.0)
        assert pins[name].release[: len(lower.release)] == lower.release, f"{name}: pin {pins[name]} is not at the bound {lower}"


def test_the_lowest_venv_runs_the_pinned_versions():
    if not sys.prefix.rstrip("/").endswith(".venv-lowest"):
        pytest.skip("only in .venv-lowest (hack/run-tiers.sh)")
    for name, version in lowest_pins().items():
        assert Version(importlib.metadata.version(name)) == version, name
