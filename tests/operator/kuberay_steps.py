"""Helpers moved out of tests/operator/test_kuberay_sequences.py (test modules hold tests only)."""

from __future__ import annotations

import copy

from lorarl.control import status
from lorarl.control.health import Verdict

UNKNOWN = Verdict("Unknown", "AwaitingMetrics", "no step yet")


T1 = "2026-11-30T11:00:00Z"


def walk(steps, queue_name):
    """compute() over the steps as the operator calls it, the previous status carried along."""
    previous: dict = {}
    phases, events = [], []
    for ray_suspend, st, user_suspend, _ in steps:
        rj = None if st is None else {"metadata": {"name": "j"}, "spec": {"suspend": ray_suspend}, "status": copy.deepcopy(st)}
        facts = status.Facts(generation=1, now=T1, user_suspended=user_suspend, queue_name=queue_name, verdict=UNKNOWN)
        out, evs = status.compute(previous, rj, facts)
        previous = out
        phases.append(out["phase"])
        events += [(e.type, e.reason) for e in evs]
    return phases, events


class MemoryKube:
    """The two calls the stand-in makes, on one RayJob held in memory (JSON merge patch)."""

    def __init__(self, spec):
        self.obj = {"metadata": {"name": "j"}, "spec": spec, "status": {}}

    def get(self, api_version, kind, namespace, name):
        return copy.deepcopy(self.obj)

    def patch_status(self, api_version, kind, namespace, name, patch):
        for key, value in patch.items():
            if value is None:
                self.obj["status"].pop(key, None)
            else:
                self.obj["status"][key] = value
        return self.obj
