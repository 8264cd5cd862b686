"""Fixtures for operator tests on the real control plane: the operator as a real process."""

from __future__ import annotations

import pytest
from lorarl_dev.operatorproc import OperatorProcess  # noqa: F401 (re-exported for the tests)

from tests.helpers import operator_process


@pytest.fixture
def operator(control_plane, namespace, tmp_path, request):
    with operator_process(control_plane, namespace, tmp_path, request.node) as op:
        yield op
