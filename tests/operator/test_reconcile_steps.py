"""The reconcile's steps one by one (control/reconcile.py, ``Reconciler.reconcile``), against a
recording stand-in of the API layer; the whole chain on the real API server is in
test_operator.py and the other live tests."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from lorarl.control import health, status
from lorarl.control.reconcile import Pass, Reconciler
from lorarl.job import render
from lorarl.runtime.kube import ApiError

from tests.helpers import job_from, with_spec

NOW = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC)
BAD = health.Verdict("False", "LogprobDiffTooHigh", "logprob diff 0.9 > 0.5")
OK = health.Verdict("True", "WithinThresholds", "")
CLAIM_EXPORT = {"destinations": [{"claim": {"claimName": "adapters", "path": "team/"}}]}


class Recorder:
    """The API layer's calls the steps make, answered from ``objects`` ((kind, name) -> body);
    ``refuse``: the kind whose apply the API server refuses as invalid."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]] | None = None, refuse: str | None = None) -> None:
        self.objects, self.refuse, self.calls = dict(objects or {}), refuse, []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", kind, name))
        return self.objects.get((kind, name))

    def list(self, api_version: str, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.calls.append(("list", kind, selector))
        return []

    def apply(self, obj: dict[str, Any], field_manager: str, answer: bool = False, force: bool = True) -> dict[str, Any]:
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"]))
        if obj["kind"] == self.refuse:
            raise ApiError(422, "Unprocessable Entity", f"{obj['kind']} is invalid", status_reason="Invalid")
        stored = {**obj, "metadata": {**obj["metadata"], "uid": f"uid-{obj['kind']}", "creationTimestamp": "2026-12-06T11:00:00Z"}}
        if "status" in (before := self.objects.get((obj["kind"], obj["metadata"]["name"])) or {}):
            stored["status"] = before["status"]  # an apply of the spec leaves the status as it is
        self.objects[(obj["kind"], obj["metadata"]["name"])] = stored
        return stored

    def delete(self, api_version: str, kind: str, namespace: str, name: str, **_: Any) -> bool:
        self.calls.append(("delete", kind, name))
        return self.objects.pop((kind, name), None) is not None

    def patch_status(self, api_version: str, kind: str, namespace: str, name: str, patch: dict[str, Any], field_manager: str) -> dict[str, Any]:
        self.calls.append(("patch_status", kind, name))
        return {}

    def kinds(self, verb: str) -> list[str]:
        return [kind for v, kind, _ in self.calls if v == verb]


def body_of(doc: dict[str, Any], phase: str | None = None) -> dict[str, Any]:
    doc["metadata"].update(namespace="ns", uid="job-uid", generation=1, creationTimestamp="2026-12-06T10:00:00Z")
    if phase:
        doc["status"] = {"phase": phase, "observedGeneration": 1}
    return doc


def rayjob_of(job_doc: dict[str, Any], deployment: str, job_status: str) -> dict[str, Any]:
    name = render.rayjob_name(job_from(job_doc))
    return {
        "apiVersion": render.RAYJOB_API_VERSION,
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": "ns", "uid": "rj-uid", "creationTimestamp": "2026-12-06T10:00:00Z"},
        "spec": {"suspend": False},
        "status": {"jobDeploymentStatus": deployment, "jobStatus": job_status, "startTime": "2026-12-06T10:01:00Z", "rayClusterName": f"{name}-abc"},
    }


def a_pass(doc: dict[str, Any], rayjob: dict[str, Any] | None = None, finished: bool = False, verdict: health.Verdict = OK) -> Pass:
    body = body_of(doc)
    return Pass(body, body.get("status") or {}, 1, NOW, job_from(doc), rayjob, finished=finished, verdict=verdict)


def test_stop_unhealthy_deletes_the_rayjob_only_when_the_spec_says_stop_and_the_verdict_is_bad():
    doc = with_spec(health={"stopOnUnhealthy": "Stop"})
    live = rayjob_of(doc, "Running", "RUNNING")
    kube = Recorder({("RayJob", live["metadata"]["name"]): live})
    run = a_pass(doc, live, verdict=BAD)
    run.quiet, run.lost = "quiet", "lost"
    assert Reconciler(kube)._stop_unhealthy(run) is True
    assert kube.calls == [("delete", "RayJob", live["metadata"]["name"])]
    assert run.stopped and run.rayjob is None and run.quiet is None and run.lost is None
    assert [n.reason for n in run.notes] == ["StoppingUnhealthy"]
    for unstopped in (a_pass(doc, live, verdict=OK), a_pass(with_spec(), live, verdict=BAD), a_pass(doc, live, finished=True, verdict=BAD)):
        kube.calls.clear()
        assert Reconciler(kube)._stop_unhealthy(unstopped) is False and kube.calls == [] and not unstopped.stopped


def test_apply_children_makes_every_child_in_order_then_only_what_changed():
    doc = with_spec()
    kube = Recorder()
    run = a_pass(doc)
    Reconciler(kube)._apply_children(run, everything=False)
    applied = kube.kinds("apply")
    assert applied[-1] == "RayJob" and len(applied) == run.applied >= 4  # what the RayJob mounts first, the RayJob last
    assert run.rayjob is not None and run.apply_failed is None
    # the next pass reads the RayJob with its record: nothing changed, nothing applied
    kube.calls.clear()
    again = a_pass(with_spec(), run.rayjob)
    Reconciler(kube)._apply_children(again, everything=False)
    assert kube.calls == [] and again.applied == 0
    # asked for everything (the periodic repair): every child again
    Reconciler(kube)._apply_children(again, everything=True)
    assert kube.kinds("apply") == applied


def test_apply_children_stops_at_a_refusal_naming_the_child_and_a_finished_job_gets_none():
    kube = Recorder(refuse="ConfigMap")
    run = a_pass(with_spec())
    Reconciler(kube)._apply_children(run, everything=True)
    assert kube.kinds("apply")[-1] == "ConfigMap" and "RayJob" not in kube.kinds("apply")
    assert run.apply_failed is not None and "ConfigMap" in run.apply_failed and run.rayjob is None
    finished = a_pass(with_spec(), finished=True)
    Reconciler(Recorder())._apply_children(finished, everything=True)
    assert finished.applied == 0


@pytest.mark.parametrize(
    ("deployment", "job_status", "phase", "exported"),
    [("Running", "RUNNING", "Running", False), ("Complete", "SUCCEEDED", "Succeeded", True), ("Complete", "FAILED", "Failed", False)],
)
def test_the_phase_is_decided_once_and_the_export_runs_only_after_succeeded(monkeypatch, deployment, job_status, phase, exported):
    doc = body_of(with_spec(export=CLAIM_EXPORT), phase="Running")
    live = rayjob_of(doc, deployment, job_status)
    kube = Recorder({("LoraRLJob", doc["metadata"]["name"]): doc, ("RayJob", live["metadata"]["name"]): live})
    calls = {"decide": 0, "compute": 0}
    for name in calls:
        real = getattr(status, name)
        monkeypatch.setattr(status, name, lambda *a, _real=real, _name=name, **k: (calls.__setitem__(_name, calls[_name] + 1), _real(*a, **k))[1])
    outcome = Reconciler(kube, clock=lambda: NOW).reconcile("ns", doc["metadata"]["name"], apply_children=False)
    assert outcome.phase == phase
    assert calls == {"decide": 1, "compute": 1}
    export_jobs = [name for verb, kind, name in kube.calls if verb == "apply" and kind == "Job"]
    assert bool(export_jobs) is exported, kube.calls
