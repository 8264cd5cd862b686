"""What the bench creates, and how it sees work being done.

* LoraRLJobs: copies of the seed example ``manifests/qwen3-4b-lora-amd.yaml`` named ``job-NNNNN``.
* RayJobs for KubeRay's operator: the RayJob our renderer makes of the same job, without the
  owner reference (its owner does not exist in KubeRay's namespace).
* Finished jobs: the RayJob statuses that the KubeRay stand-in ``lorarl_dev.kuberay_sim.FakeKubeRay``
  writes for initializing -> submitted -> running (-> succeeded), folded into one status; and
  LoraRLJobs whose status is what ``lorarl.control.status.compute`` makes of that sequence (jobs a
  running operator handled long ago: the operator keeps no record on the object itself).
* ``Tracker``: the first time each job reached each mark, from watches.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import pathlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import yaml
from lorarl.control import health, reconcile, status
from lorarl.control.stored import parse_stored
from lorarl.job import render
from lorarl_dev.kuberay_sim import FakeKubeRay

from .kclient import Client

REPO = pathlib.Path(__file__).resolve().parents[1]
SEED = REPO / "manifests" / "qwen3-4b-lora-amd.yaml"
JOB = ("lorarl.dev/v1alpha1", "LoraRLJob")
RAYJOB = ("ray.io/v1", "RayJob")
RAYCLUSTER = ("ray.io/v1", "RayCluster")


def job_name(i: int) -> str:
    return f"job-{i:05d}"


def lorarl_job(namespace: str, i: int) -> dict[str, Any]:
    doc = yaml.safe_load(SEED.read_text())
    doc["metadata"] = {"name": job_name(i), "namespace": namespace}
    return doc


def stored(doc: dict[str, Any], uid: str = "00000000-0000-0000-0000-000000000000") -> dict[str, Any]:
    """A document as the API server would return it (what parse_stored and render need)."""
    body = copy.deepcopy(doc)
    body["metadata"].update(uid=uid, generation=1)
    return body


def rayjob_for_kuberay(namespace: str, i: int) -> dict[str, Any]:
    job, _ = parse_stored(stored(lorarl_job(namespace, i)))
    rayjob = render.rayjob(job)
    rayjob["metadata"].pop("ownerReferences", None)
    rayjob["spec"]["suspend"] = False
    return rayjob


class _SpecOnly:
    """The Api that FakeKubeRay talks to, reduced to what it reads (the spec) and recording
    nothing: the bench writes the folded status itself, in one request."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec

    def get(self, *_: Any) -> dict[str, Any]:
        return {"spec": self.spec}

    def patch_status(self, *_: Any) -> None:
        pass


def kuberay_statuses(rayjob: dict[str, Any], finished: bool) -> list[dict[str, Any]]:
    """The statuses KubeRay writes on the way to Running (and Succeeded), per the stand-in."""
    ray = FakeKubeRay(_SpecOnly(rayjob["spec"]), rayjob["metadata"]["namespace"], rayjob["metadata"]["name"])
    steps = [ray.initializing, ray.submitted, ray.running] + ([ray.succeeded] if finished else [])
    return [copy.deepcopy(step()) for step in steps]


def finished_job(namespace: str, i: int, uid: str = "00000000-0000-0000-0000-000000000000") -> tuple[dict[str, Any], dict[str, Any]]:
    """(LoraRLJob document, its status): a job the operator saw through to Succeeded two days
    ago (history: outside the per-job metrics window, ``--finished-metrics-seconds``, as most
    finished jobs of a cluster are)."""
    doc = lorarl_job(namespace, i)
    job, _ = parse_stored(stored(doc, uid))
    rayjob = render.rayjob(job)
    verdict = health.evaluate(job.spec.health, {})
    previous: dict[str, Any] = {}
    then = reconcile.rfc3339(reconcile.utcnow() - HISTORY_AGE)
    for st in [None, *kuberay_statuses(rayjob, finished=True)]:
        if st is not None:  # the stand-in stamps KubeRay's times with now: the run ended back then
            st.update({k: then for k in ("startTime", "endTime") if k in st})
        live = None if st is None else {**rayjob, "status": st}
        facts = status.Facts(generation=1, now=then, user_suspended=False, queue_name=None, verdict=verdict)
        new, _ = status.compute(previous, live, facts)
        previous = {**previous, **new}
    return doc, previous


HISTORY_AGE = datetime.timedelta(days=2)

Mark = Callable[[dict[str, Any]], Iterable[tuple[str, str]]]


class Tracker:
    """For each job, the monotonic time it first reached each mark (seen in a watch)."""

    def __init__(self, required: tuple[str, ...]):
        self.required = required
        self.marks: dict[str, dict[str, float]] = {}
        self.phases: dict[str, str] = {}
        self.done_count = 0
        self.changed = asyncio.Event()

    def mark(self, job: str, what: str, at: float) -> None:
        marks = self.marks.setdefault(job, {})
        if what in marks:
            return
        marks[what] = at
        if what in self.required and all(m in marks for m in self.required):
            self.done_count += 1
            self.changed.set()

    def done_at(self, job: str) -> float | None:
        marks = self.marks.get(job, {})
        return max(marks[m] for m in self.required) if all(m in marks for m in self.required) else None

    async def follow(self, client: Client, kind: tuple[str, str], namespace: str, rv: str, marks: Mark) -> None:
        async for _, obj in client.watch(*kind, namespace, rv):
            now = time.monotonic()
            for job, what in marks(obj):
                self.mark(job, what, now)
            if kind == JOB:
                phase = (obj.get("status") or {}).get("phase")
                if phase:
                    self.phases[obj["metadata"]["name"]] = phase
                    self.changed.set()

    async def wait(self, predicate: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what()}")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(remaining, 1.0))
            except TimeoutError:
                pass


def job_status_mark(obj: dict[str, Any]) -> list[tuple[str, str]]:
    st = obj.get("status") or {}
    return [(obj["metadata"]["name"], "status")] if st.get("observedGeneration") is not None else []


def owned_rayjob_mark(obj: dict[str, Any]) -> list[tuple[str, str]]:
    owner = (obj["metadata"].get("labels") or {}).get(render.JOB_LABEL)
    return [(owner, "child")] if owner else []


def kuberay_status_mark(obj: dict[str, Any]) -> list[tuple[str, str]]:
    st = obj.get("status") or {}
    return [(obj["metadata"]["name"], "status")] if st.get("jobDeploymentStatus") and st.get("rayClusterName") else []


def raycluster_mark(obj: dict[str, Any]) -> list[tuple[str, str]]:
    owners = obj["metadata"].get("ownerReferences") or []
    return [(o["name"], "child") for o in owners if o.get("kind") == "RayJob"]
