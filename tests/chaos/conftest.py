"""Chaos tests: faults of the operator, the API server and etcd, on the embedded control plane.

Fixtures:

``operators``
    a factory of `lorarl run` processes (:class:`lorarl_dev.operatorproc.OperatorProcess`); at
    teardown each is stopped and its whole log (every start) is scanned: an unexpected traceback
    fails the test (``ALLOWED_TRACEBACKS`` lists the expected ones, each with its reason).
``figures``
    records measured numbers (time to converge per fault); they are printed at the end of the
    run and written to ``<pytest basetemp>/chaos-figures.json`` (docs/reliability.md quotes them).
``isolated_plane``
    a control plane of the module's own, for faults of kube-apiserver and etcd that must not
    disturb the session's shared one.
"""

from __future__ import annotations

import json
import os

import pytest
from lorarl.runtime.kube import Api
from lorarl_dev.controlplane import ControlPlane
from lorarl_dev.operatorproc import OperatorProcess
from lorarl_dev.pytest_plugin import call_failed, namespace_name

#: Tracebacks a chaos test may leave in the operator's log: regex -> why it is expected.
#: Empty: every traceback seen while writing these tests had a cause that was fixed instead.
ALLOWED_TRACEBACKS: dict[str, str] = {}

_FIGURES: list[dict] = []


@pytest.fixture(scope="session")
def figures(tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "chaos-figures.json"

    def record(test: str, fault: str, **numbers) -> None:
        row = {
            "test": test,
            "fault": fault,
            **{k: round(v, 2) if isinstance(v, float) else v for k, v in numbers.items()},
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        _FIGURES.append(row)
        path.write_text(json.dumps(_FIGURES, indent=2) + "\n")
        print(f"chaos figure: {json.dumps(row)}")

    record.path = path
    return record


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("chaos figures (seconds)")
        for row in _FIGURES:
            terminalreporter.write_line(json.dumps(row))


@pytest.fixture
def operators(request, tmp_path):
    started: list[OperatorProcess] = []

    def make(control_plane, namespace, **options) -> OperatorProcess:
        op = OperatorProcess(control_plane, namespace, tmp_path, log_name=f"operator-{len(started)}.log", **options)
        started.append(op)
        return op.start()

    yield make
    for op in started:
        op.stop()
    failed = call_failed(request.node)
    for op in started:
        if failed:
            print(f"--- {op.log_path} (tail)\n{op.output()[-4000:]}")
        op.assert_no_tracebacks(ALLOWED_TRACEBACKS)


@pytest.fixture(scope="module")
def isolated_plane():
    with ControlPlane(verbose=True) as cp:
        yield cp


@pytest.fixture
def isolated_namespace(request, isolated_plane):
    name = namespace_name(request.node.name)
    isolated_plane.kubectl("create", "namespace", name)
    yield name
    isolated_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def isolated_kube(isolated_plane):
    client = isolated_plane.api_client()
    api = Api(client)
    yield api
    api.close()
    client.close()
