"""Fixtures of the end-to-end tests: one real node, one Hub stand-in, one operator install (two
replicas, leader election) for the whole session; a namespace and a model revision per test."""

from __future__ import annotations

import json
import pathlib
import shutil
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from lorarl_dev import hubstub, seedrun

# What the e2e tests measured, printed once at the end of the run (a fixture's own output is
# kept by pytest for passing tests): the seconds each failure takes to show (docs/troubleshooting.md)
MEASURED: list[str] = []


def pytest_terminal_summary(terminalreporter):
    if MEASURED:
        terminalreporter.section("measured on the real node")
        for line in MEASURED:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def hub(real_node_cluster, tmp_path_factory):
    """The Hub stand-in on the node IP, serving the seed's repos; ``hub.revision(knobs)`` adds a
    model revision with the trainer stand-in's knobs (one per test)."""
    root = tmp_path_factory.mktemp("hub")
    hubstub.make_seed_repos(str(root))
    endpoint = seedrun.start_hub(real_node_cluster, root)
    return Hub(root, endpoint)


class Hub:
    def __init__(self, root: pathlib.Path, endpoint: str) -> None:
        self.root, self.endpoint = root, endpoint

    def revision(self, knobs: dict, config: dict | None = None) -> str:
        """A new revision of the seed model whose ``standin.json`` is ``knobs`` (and whose
        config.json is ``config``, e.g. hubstub.tiny_config())."""
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        model = self.root / "models" / hubstub.SEED_MODEL
        shutil.copytree(model / "main", model / name)
        (model / name / "standin.json").write_text(json.dumps(knobs))
        if config is not None:
            (model / name / "config.json").write_text(json.dumps(config, indent=2))
        return name


@pytest.fixture(scope="session")
def node_images(real_node_cluster):
    """The operator and job images, built (or cached) and imported into the node: name -> ref."""
    return seedrun.import_images(real_node_cluster)


@pytest.fixture(scope="session")
def lorarl_operator(real_node_cluster, node_images):
    """The chart installed with the built image: two replicas, leader election on, in a namespace
    that enforces the restricted Pod Security profile."""
    seedrun.install_operator(real_node_cluster, node_images["operator"], replicas=2)
    return seedrun.OPERATOR_NAMESPACE


@pytest.fixture
def job_ns(real_node_cluster, lorarl_operator):
    name = make_namespace(real_node_cluster)
    yield name
    release_namespace(real_node_cluster, name)


def make_namespace(cp) -> str:
    """A fresh namespace for one test's (or one module's) jobs."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    cp.kubectl("create", "namespace", name)
    return name


def release_namespace(cp, name: str) -> None:
    """Its test is over: its pods go at once (`ray start --block` waits out the 30 s grace period
    on SIGTERM), so the next test's pods get the node's GPUs and CPU without waiting for them."""
    cp.kubectl("delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", "--wait=false", check=False)
    cp.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def kueue_on_node(real_node_cluster):
    """The session's real node with Kueue beside it (started because a selected test uses this
    fixture: lorarl_dev.pytest_plugin.real_node_cluster), its ResourceFlavor ``mi355x``."""
    if not real_node_cluster.kueue:
        pytest.skip("Kueue is not running beside the real node")
    return real_node_cluster


@pytest.fixture
def flux_owns_the_operator(real_node_cluster, node_images):
    """The operator that Flux installs from manifests/install is the only one for one test: the
    bundle has the chart's names (release "lorarl" in lorarl-system, all namespaces), so the
    session's chart-installed operator (``lorarl_operator``) would reconcile the same jobs.

    Before: the release, if installed, uninstalled (its Pods gone; the CRD stays, as helm leaves
    it), and the namespace ``flux-system`` made if missing. After, whatever the test did: every
    Kustomization and GitRepository of flux-system deleted and what Flux applied pruned and
    gone (the CRD kept), then the chart installed again as it was (its replicas), if it was.
    Independent of the order of the tests: ``lorarl_operator`` may run before or after it."""
    from lorarl_dev import flux
    from lorarl_dev.pytest_plugin import flux_missing

    cp = real_node_cluster
    if not cp.flux:
        pytest.skip(flux_missing() or "Flux is not running beside the real node")
    replicas = seedrun.installed_replicas(cp)
    if replicas is not None:
        seedrun.uninstall_operator(cp)
    made = cp.kubectl("create", "namespace", FLUX_NAMESPACE, check=False).returncode == 0
    try:
        yield FLUX_NAMESPACE
    finally:
        try:
            flux.remove_all(cp, FLUX_NAMESPACE)
            if made:
                cp.kubectl("delete", "namespace", FLUX_NAMESPACE, "--wait=false")
        finally:
            if replicas is not None:
                seedrun.install_operator(cp, node_images["operator"], replicas=replicas)


#: where `flux install` puts Flux's objects, and docs/gitops.md its GitRepository and Kustomizations
FLUX_NAMESPACE = "flux-system"


class Scenario:
    """A test's run started by a module fixture in a thread of its own, so that two runs that do
    not disturb each other share the node at once; the test then calls :meth:`result`, which waits
    for the run and raises what it raised. The thread is a daemon: a run still waiting when the
    session ends does not hold it (its namespace is gone by then)."""

    def __init__(self, name: str, run: Callable[[], Any]) -> None:
        self.name, self._value, self._error = name, None, None
        self._thread = threading.Thread(target=self._run, args=(run,), name=f"scenario-{name}", daemon=True)
        self._thread.start()

    def _run(self, run: Callable[[], Any]) -> None:
        try:
            self._value = run()
        except BaseException as error:  # noqa: BLE001 - handed to the test, which raises it
            self._error = error

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout: float) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the {self.name} run: not done after {timeout:.0f}s")
        if self._error is not None:
            raise self._error
        return self._value
