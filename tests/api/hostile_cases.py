"""Helpers moved out of tests/api/test_hostile.py (test modules hold tests only)."""

from __future__ import annotations

import pathlib

import yaml

CORPUS = pathlib.Path(__file__).parent / "hostile"


def load_case(path: pathlib.Path) -> tuple[dict, dict]:
    case = yaml.safe_load(path.read_text())
    job = case["job"]
    if "expand" in case:  # a huge value, built here instead of committed
        node = job
        *parents, leaf = case["expand"]["path"]
        for name in parents:
            node = node[name]
        node[leaf] = case["expand"]["text"] * case["expand"]["times"]
    return job, case["expect"]


def update_of(path: pathlib.Path) -> dict | None:
    return yaml.safe_load(path.read_text()).get("update")


CASES = sorted(CORPUS.glob("*.yaml"))


ACCEPTED = [p for p in CASES if load_case(p)[1].get("accepted")]
