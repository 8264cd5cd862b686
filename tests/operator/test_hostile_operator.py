"""The accepted cases of the hostile corpus (tests/api/hostile) through the real operator process:
each is created, reconciled into all its children without an operator error, and the RayJob the
operator applied runs, through the real quoting chain, exactly the command its spec means."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client as k8s
from lorarl.api import types as api
from lorarl.control.stored import parse_stored
from lorarl.job import command, render

from tests.api.hostile_cases import ACCEPTED, load_case
from tests.api.quoting_chain import Chain
from tests.helpers import wait_for

pytestmark = pytest.mark.controlplane


def test_accepted_hostile_cases_are_reconciled_safely(kube_api, kube, namespace, operator):
    jobs = []
    for path in ACCEPTED:
        doc, _ = load_case(path)
        doc = copy.deepcopy(doc)
        doc["metadata"]["namespace"] = namespace
        k8s.CustomObjectsApi(kube_api).create_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, doc)
        jobs.append(doc["metadata"]["name"])

    def reconciled(name):
        def check():
            stored = kube.get(api.API_VERSION, api.KIND, namespace, name)
            status = (stored or {}).get("status") or {}
            return stored if status.get("phase") == "Pending" and status.get("observedGeneration") == 1 else None

        return check

    with Chain() as chain:
        for name in jobs:
            stored = wait_for(reconciled(name), timeout=120, what=f"{name} reconciled to Pending")
            conditions = {c["type"]: c for c in stored["status"]["conditions"]}
            assert conditions.get("Stalled", {}).get("status") != "True", conditions["Stalled"]
            job, _ = parse_stored(stored)
            for child in render.render(job):
                meta = child["metadata"]
                assert kube.get(child["apiVersion"], child["kind"], namespace, meta["name"]) is not None, (name, child["kind"])
            rayjob = kube.get("ray.io/v1", "RayJob", namespace, render.rayjob_name(job))
            assert chain.run(rayjob["spec"]["entrypoint"]).argv == command.entrypoint_argv(job)[1:], name
    log = operator.output()
    assert "Traceback" not in log, log[-3000:]
    for name in jobs:
        assert f"[{namespace}/{name}] reconcile" in log
