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


@pytest.fixture(scope="session")
def service_netns():
    """A network namespace with an address off loopback, for the servers the export and load
    pods must reach (tests.helpers.ServiceNetns)."""
    import shutil

    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("nsenter")):
        pytest.skip("the servers the load and export pods reach run in a network namespace of the harness: needs root, ip and nsenter")
    from tests.helpers import ServiceNetns

    ns = ServiceNetns("services")
    try:
        yield ns
    finally:
        ns.close()


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
    selected, deselected = [], []
    for item in items:
        (selected if tier_of(item) == tier else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


#: what the unit tier may not start: servers, clusters and venvs belong to the api tier (marker
#: ``servers`` or a control-plane fixture). Matched against a program's name or a ``-m`` module.
NOT_IN_UNIT = {
    "etcd",
    "kube-apiserver",
    "kubelet",
    "containerd",
    "buildah",
    "crane",
    "moto_server",
    "redis-server",
    "venv",
    "nsenter",
    "lorarl_dev.hubstub",
    "lorarl_dev.sglangstub",
    "lorarl_dev.registry",
}


def _started_program(args) -> set[str]:
    argv = [str(a) for a in (args if isinstance(args, list | tuple) else str(args).split())]
    names = {os.path.basename(argv[0])} if argv else set()
    names.update(argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-m")
    return names & NOT_IN_UNIT


def pytest_configure(config):
    """Under ``--tier unit``, a test (or a fixture) that starts a server, a cluster or a venv fails,
    naming the program: the tier's promise is kept by the code, not by the markers alone."""
    if config.getoption("--tier") != "unit":
        return
    import subprocess

    real_init = subprocess.Popen.__init__

    def guarded(self, args, *a, **kw):
        started = _started_program(args)
        if started:
            pytest.fail(f"the unit tier starts no server: this test starts {', '.join(sorted(started))}; mark it `servers` (the api tier, tests/conftest.py)")
        real_init(self, args, *a, **kw)

    subprocess.Popen.__init__ = guarded
