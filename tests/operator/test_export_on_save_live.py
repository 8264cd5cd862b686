"""Exports at each complete save (spec.export.onSave), on the real API server and
kube-controller-manager (its Job controller), with the operator as a real process.

The reporter's status.checkpoints is patched as the in-job reporter writes it; no kubelet runs
here, so each export pod is reported ended the way the kubelet reports it, with the termination
message the real exporter writes for a real save of that rollout (tests/helpers.exporter_report).
The oracles: the Jobs the real API server stores, the Job controller's pods and conditions, the
operator's own log line of each reconcile (evidence before asserting it did nothing)."""

from __future__ import annotations

import json

import pytest
from lorarl_dev.kuberay_sim import FakeKubeRay

from tests.helpers import (
    NAME,
    apply_job,
    conditions,
    count_reconciles,
    end_export_pod,
    events,
    export_pod,
    exporter_report,
    job,
    phase_is,
    rayjob,
    seed_doc,
    wait_for,
)

pytestmark = pytest.mark.controlplane


def _saved(kube, namespace, rollout: int):
    return kube.get("batch/v1", "Job", namespace, f"{NAME}-export-r{rollout:07d}")


def _checkpoint(kube, namespace, rollout: int) -> None:
    """What the in-job reporter writes when the save of ``rollout`` is complete."""
    path = f"/root/shared_data/{NAME}/checkpoints/iter_{rollout:07d}/adapter"
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"checkpoints": {"latestIteration": rollout, "latestPath": path}})


def test_each_complete_save_is_exported_one_at_a_time_and_the_final_export_stays(control_plane, kube, namespace, operator, tmp_path):
    doc = seed_doc()
    doc["spec"]["export"] = {"destinations": [{"claim": {"claimName": "served-adapters", "path": "team/"}}], "onSave": True, "backoffLimit": 0}
    apply_job(control_plane, namespace, doc)
    wait_for(lambda: rayjob(kube, namespace, NAME), what="the RayJob")
    ray = FakeKubeRay(kube, namespace, NAME)
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running")

    # the first complete save: an export Job of its own, for that rollout
    _checkpoint(kube, namespace, 49)
    first = wait_for(lambda: _saved(kube, namespace, 49), what="the export at the save of rollout 49")
    assert first["metadata"]["labels"]["lorarl.dev/export-rollout"] == "49"
    plan = json.loads(kube.get("v1", "ConfigMap", namespace, f"{NAME}-export-r0000049")["data"]["plan.json"])
    assert plan["rollout"] == 49
    assert kube.get("batch/v1", "Job", namespace, f"{NAME}-export") is None  # the final export waits for Succeeded

    # a newer save while it runs: nothing more until it ends (one at a time)
    seen = count_reconciles(operator, namespace, "): phase Running")
    _checkpoint(kube, namespace, 59)
    wait_for(lambda: count_reconciles(operator, namespace, "): phase Running") > seen, timeout=60, what="a reconcile after the new save")
    assert _saved(kube, namespace, 59) is None

    # it ends: status.adapter is that export while the run goes on; then the newest save's export starts
    end_export_pod(kube, namespace, export_pod(kube, namespace, child="export-r0000049"), exporter_report(tmp_path / "r49", rollout=49, at_save=True), ok=True)
    st = wait_for(
        lambda: (lambda s: s if (s.get("adapter") or {}).get("rollout") == 49 else None)(job(kube, namespace)["status"]),
        timeout=60,
        what="status.adapter at rollout 49",
    )
    assert st["phase"] == "Running" and "AdapterExported" not in conditions(st)  # the condition is the final export's
    assert st["adapter"]["uri"].endswith("/rollout-0000049/")
    wait_for(lambda: ("Normal", "AdapterExportedAtSave") in events(kube, namespace), what="the AdapterExportedAtSave event")
    wait_for(lambda: _saved(kube, namespace, 59), timeout=60, what="the export at the save of rollout 59")

    # the run succeeds: the final export starts; the exports at saves do not stand in for it
    ray.succeeded()
    wait_for(lambda: kube.get("batch/v1", "Job", namespace, f"{NAME}-export"), timeout=60, what="the final export Job")
    st = job(kube, namespace)["status"]
    assert conditions(st)["AdapterExported"] == ("Unknown", "Exporting") and st["adapter"]["rollout"] == 49
    end_export_pod(kube, namespace, export_pod(kube, namespace), exporter_report(tmp_path / "final", rollout=99), ok=True)
    st = wait_for(
        lambda: (lambda s: s if conditions(s).get("AdapterExported", ("",))[0] == "True" else None)(job(kube, namespace)["status"]),
        timeout=60,
        what="AdapterExported True",
    )
    assert st["adapter"]["rollout"] == 99 and st["phase"] == "Succeeded"
