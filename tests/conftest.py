"""The suite's three tiers (README.md, docs/development.md), chosen with ``--tier``:

- ``unit``: no server, no cluster; render, validation, status, command, parser, CLI, chart
  templates, the reporter and the trainer stand-in. ``make test-unit`` (pytest -n 2).
- ``api``: a real control plane (marker ``controlplane``, given by the fixtures of
  ``lorarl_dev.pytest_plugin``) or a local server or venv (marker ``servers``). ``make test-api``.
- ``e2e``: the real node and the images (markers ``node``, ``images``). ``make test-e2e``.

Every test is in exactly one tier (``tier_of``); without ``--tier`` pytest runs them all."""

import os

import pytest
from hypothesis import settings
from lorarl.runtime.kube import Api

pytest_plugins = ["lorarl_dev.pytest_plugin"]

from tests.chart.helm import helm  # noqa: E402,F401  (the session fixture: real helm, empty homes)
from tests.helpers import operator_api  # noqa: E402

# Hypothesis: no per-example deadline (the fuzz runs real shells and a real API server on shared
# machines); in CI (CI set, or HYPOTHESIS_PROFILE=ci) derandomized, so a run is reproducible and
# its time predictable. The example counts are set per test (LORARL_FUZZ_EXAMPLES, default 500).
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def kube(control_plane) -> Api:
    """The operator's own API client, as admin, on the session's control plane."""
    with operator_api(control_plane) as api:
        yield api


TIERS = ("unit", "api", "e2e")


def tier_of(item) -> str:
    """The one tier a test belongs to, from its markers."""
    if item.get_closest_marker("node") or item.get_closest_marker("images"):
        return "e2e"
    if item.get_closest_marker("controlplane") or item.get_closest_marker("servers"):
        return "api"
    return "unit"


def pytest_addoption(parser):
    parser.addoption("--tier", choices=TIERS, help="run one tier of the suite (tests/conftest.py): unit, api or e2e")


@pytest.hookimpl(trylast=True)  # after lorarl_dev.pytest_plugin has marked the control-plane and node tests
def pytest_collection_modifyitems(config, items):
    tier = config.getoption("--tier")
    if not tier:
        return
    selected = [item for item in items if tier_of(item) == tier]
    deselected = [item for item in items if tier_of(item) != tier]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
