"""Fixtures for operator tests on the real control plane: the operator as a real process."""

from __future__ import annotations

import pytest
from lorarl_dev.operatorproc import OperatorProcess  # noqa: F401 (re-exported for the tests)


@pytest.fixture
def operator(control_plane, namespace, tmp_path, request):
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    yield op
    op.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(op.output()[-5000:])
    op.assert_no_tracebacks()  # a traceback in the operator's log fails the test (as in tests/chaos)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
