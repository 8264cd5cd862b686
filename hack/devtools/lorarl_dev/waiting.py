"""Polling until something holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 1.0, explain: Callable[[], str] | None = None) -> Any:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout`` saying ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = explain() if explain else ""
            raise TimeoutError(f"{what}: not after {timeout:.0f}s{': ' + detail if detail else ''}")
        time.sleep(interval)
