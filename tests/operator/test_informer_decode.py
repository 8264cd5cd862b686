"""The controller's decode hook on raw JSON (no API server): what a listed job becomes. The oracle
is ``json.loads`` of the same bytes and ``compact_job``, which the stub must equal."""

from __future__ import annotations

import json

import msgspec
from lorarl.control.cache import compact_job
from lorarl.controller import decode_job

from tests.helpers import seed_doc


def stored(status: dict | None, **spec) -> dict:
    doc = seed_doc()
    doc["metadata"] = {"name": "j", "namespace": "ns", "uid": "u-1", "generation": 1, "resourceVersion": "7", "managedFields": [{"manager": "kubectl"}]}
    doc["spec"].update(spec)
    if status is not None:
        doc["status"] = status
    return doc


def decoded(doc: dict, listed: bool = True) -> dict:
    return decode_job(msgspec.Raw(json.dumps(doc).encode()), listed)


def test_only_a_listed_settled_finished_job_without_ttl_is_a_stub():
    done = stored(
        {
            "phase": "Failed",
            "observedGeneration": 1,
            "completionTime": "2026-12-01T00:00:00Z",  # the finished job's metrics window ends from it
            "progress": {"rollout": 3, "total": 10, "gpuHours": 0.5},
            "conditions": [{"type": "Ready", "status": "False", "reason": "AppFailed", "message": "m"}, {"type": "Stalled", "status": "False"}],
        }
    )
    done["metadata"]["creationTimestamp"] = "2026-11-30T00:00:00Z"
    assert decoded(done) == compact_job(done)
    assert decoded(done)["status"]["completionTime"] == "2026-12-01T00:00:00Z"
    for whole in (
        stored({"phase": "Succeeded", "observedGeneration": 1}, ttlSecondsAfterFinished=30),  # its deletion is still to be scheduled
        stored({"phase": "Succeeded", "observedGeneration": 0}),  # a generation not yet observed
        stored({"phase": "Running", "observedGeneration": 1}),
        stored(None),
    ):
        assert decoded(whole) == whole
    assert decoded(done, listed=False) == done  # a watch event is always whole


def test_an_object_the_peek_cannot_type_is_decoded_whole():
    odd = stored({"phase": "Succeeded", "observedGeneration": "1"})  # not as the schema says
    assert decoded(odd) == odd
