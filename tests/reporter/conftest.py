"""Fixtures for the status reporter tests (helpers live in reporter_testlib.py)."""

from __future__ import annotations

import pytest

from tests.reporter.reporter_testlib import FakeApi, MilesLog, generate_miles_log, load_reporter


@pytest.fixture(scope="session")
def reporter():
    return load_reporter()


@pytest.fixture(scope="session")
def miles_log() -> MilesLog:
    return generate_miles_log()


@pytest.fixture
def fake_api():
    api = FakeApi()
    api.thread.start()
    yield api
    api.server.shutdown()
    api.server.server_close()
