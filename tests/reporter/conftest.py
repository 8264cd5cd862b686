"""Fixtures for the status reporter tests (helpers live in reporter_testlib.py)."""

from __future__ import annotations

import pytest

from tests.reporter.reporter_testlib import FakeApi, generate_miles_log, load_reporter, write_artifact


@pytest.fixture(scope="session")
def reporter():
    return load_reporter()


@pytest.fixture(scope="session")
def miles_log():
    return generate_miles_log()


@pytest.fixture(scope="session")
def artifact_path(tmp_path_factory):
    """The zipapp the operator image holds and the head's init container copies."""
    return write_artifact(tmp_path_factory.mktemp("artifact"))


@pytest.fixture
def fake_api():
    api = FakeApi()
    api.thread.start()
    yield api
    api.server.shutdown()
    api.server.server_close()
