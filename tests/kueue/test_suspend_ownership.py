"""Server-side apply field ownership of a queued RayJob's spec.suspend, on the real API server:
the facts lorarl.control.queueing relies on to leave the field to Kueue after creation."""

from __future__ import annotations

import pytest
from lorarl.control.health import Verdict
from lorarl.control.queueing import CREATE_MANAGER, owns_suspend, rayjob_apply, suspend_handoff
from lorarl.job import render
from lorarl.runtime.kube import Api

from tests.helpers import job_from, seed_doc

pytestmark = pytest.mark.controlplane
UNKNOWN = Verdict("Unknown", "AwaitingMetrics", "")


def queued_job(namespace: str):
    doc = seed_doc()
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["scheduling"] = {"queueName": "gpus"}
    return job_from(doc)


def suspend_owners(rayjob: dict) -> set[tuple[str, str]]:
    return {(e["manager"], e["operation"]) for e in rayjob["metadata"].get("managedFields", []) if "f:suspend" in (e.get("fieldsV1") or {}).get("f:spec", {})}


def apply_as_operator(kube: Api, job, live):
    obj, manager = rayjob_apply(render.rayjob(job), job, live, UNKNOWN)
    return kube.apply(obj, field_manager=manager)


def test_the_operator_creates_suspended_and_then_never_owns_suspend(kube, namespace):
    job = queued_job(namespace)
    created = apply_as_operator(kube, job, None)
    assert created["spec"]["suspend"] is True
    assert suspend_owners(created) == {(CREATE_MANAGER, "Apply")}
    # a later apply leaves the field out: the field stays (another manager owns it) ...
    again = apply_as_operator(kube, job, created)
    assert again["spec"]["suspend"] is True and suspend_owners(again) == {(CREATE_MANAGER, "Apply")}
    assert not owns_suspend(again)
    # ... Kueue admits (an update, as its client does): it takes the field over ...
    admitted = kube.merge_patch("ray.io/v1", "RayJob", namespace, job.metadata.name, {"spec": {"suspend": False}}, field_manager="kueue")
    assert suspend_owners(admitted) == {("kueue", "Update")}
    # ... and the operator's next apply does not undo the admission
    after = apply_as_operator(kube, job, admitted)
    assert after["spec"]["suspend"] is False and suspend_owners(after) == {("kueue", "Update")}


def test_a_field_dropped_by_its_only_owner_is_removed_unless_handed_over(kube, namespace):
    """Why an older operator's RayJob (its manager owns spec.suspend) is handed over first."""
    job = queued_job(namespace)
    legacy = render.rayjob(job)  # suspend: true, applied by the operator's own manager
    live = kube.apply(legacy)
    assert owns_suspend(live)
    dropped = {**legacy, "spec": {k: v for k, v in legacy["spec"].items() if k != "suspend"}}
    gone = kube.apply(dropped)
    assert "suspend" not in gone["spec"]  # the hazard: KubeRay reads this as "run now"
    live = kube.apply(legacy)
    kube.apply(suspend_handoff(live), field_manager=CREATE_MANAGER, force=False)
    kept = kube.apply(dropped)
    assert kept["spec"]["suspend"] is True and suspend_owners(kept) == {(CREATE_MANAGER, "Apply")}
