"""Fixtures for operator tests on the real control plane: the operator as a real process."""

from __future__ import annotations

import pytest
from lorarl_dev.operatorproc import OperatorProcess  # noqa: F401 (re-exported for the tests)
from lorarl_dev.pytest_plugin import call_failed


@pytest.fixture
def operator(control_plane, namespace, tmp_path, request):
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    yield op
    op.stop()
    if call_failed(request.node):
        print(op.output()[-5000:])
    op.assert_no_tracebacks()  # a traceback in the operator's log fails the test (as in tests/chaos)
