"""Shared test helpers (plain functions, no fixtures)."""

from __future__ import annotations

import copy
import pathlib
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import yaml
from lorarl.admission.validation import parse_job
from lorarl.api import types as api

REPO = pathlib.Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"
SEED = MANIFESTS / "qwen3-4b-lora-amd.yaml"


def load(path: pathlib.Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def seed_doc() -> dict[str, Any]:
    return load(SEED)


def job_from(doc: dict[str, Any]) -> api.LoraRLJob:
    return parse_job(copy.deepcopy(doc))


def with_spec(**overrides: Any) -> dict[str, Any]:
    """The seed document with spec keys replaced (camelCase, as in YAML)."""
    doc = seed_doc()
    doc["spec"].update(copy.deepcopy(overrides))
    return doc


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    """Poll until predicate() is truthy; return its value (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def http_get(port: int, path: str) -> tuple[int | None, str]:
    """(status, body) of GET http://127.0.0.1:port/path; (None, "") when nothing listens there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return None, ""
