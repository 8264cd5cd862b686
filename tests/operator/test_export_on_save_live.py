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


def _deletion_events(kube, namespace, count):
    """The SavedExportDeleted Events once there are ``count`` of them, else None."""
    events = [e for e in kube.list("v1", "Event", namespace) if e.get("reason") == "SavedExportDeleted"]
    return events if len(events) >= count else None


def _saved_rollouts(kube, namespace) -> list[int]:
    """The rollouts of the export Jobs at saves the API server holds (not being deleted)."""
    jobs = kube.list("batch/v1", "Job", namespace, f"lorarl.dev/job={NAME},lorarl.dev/export-rollout")
    return sorted(int(j["metadata"]["labels"]["lorarl.dev/export-rollout"]) for j in jobs if not j["metadata"].get("deletionTimestamp"))


def _export_pods_of(kube, namespace, rollout: int) -> list[str]:
    pods = kube.list("v1", "Pod", namespace, f"lorarl.dev/export-rollout={rollout}")
    return [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]


def _end_save_export(kube, namespace, tmp_path, rollout: int, ok: bool) -> None:
    pod = export_pod(kube, namespace, child=f"export-r{rollout:07d}")
    end_export_pod(kube, namespace, pod, exporter_report(tmp_path / f"r{rollout}", rollout=rollout, at_save=True, **({} if ok else {"states": False})), ok=ok)


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
    # the operator creates the Job before it writes the status of that pass: wait for the status too
    st = wait_for(
        lambda: (lambda s: s if "AdapterExported" in conditions(s) else None)(job(kube, namespace)["status"]),
        timeout=60,
        what="the AdapterExported condition",
    )
    assert conditions(st)["AdapterExported"] == ("Unknown", "Exporting") and st["adapter"]["rollout"] == 49
    end_export_pod(kube, namespace, export_pod(kube, namespace), exporter_report(tmp_path / "final", rollout=99), ok=True)
    st = wait_for(
        lambda: (lambda s: s if conditions(s).get("AdapterExported", ("",))[0] == "True" else None)(job(kube, namespace)["status"]),
        timeout=60,
        what="AdapterExported True",
    )
    assert st["adapter"]["rollout"] == 99 and st["phase"] == "Succeeded"
    # the final export succeeded: the ended export at a save goes, the one in flight stays
    wait_for(lambda: _saved_rollouts(kube, namespace) == [59], timeout=60, what="only the export in flight left")
    # it ends after the job has settled: deleted too (the final export supersedes it)
    _end_save_export(kube, namespace, tmp_path, 59, ok=True)
    wait_for(lambda: _saved_rollouts(kube, namespace) == [], timeout=60, what="no export Job at a save left")
    assert job(kube, namespace)["status"]["adapter"]["rollout"] == 99


def test_superseded_exports_at_saves_are_deleted_the_newest_success_and_failure_and_those_in_flight_stay(control_plane, kube, namespace, operator, tmp_path):
    doc = seed_doc()
    doc["spec"]["export"] = {"destinations": [{"claim": {"claimName": "served-adapters"}}], "onSave": True, "backoffLimit": 0}
    apply_job(control_plane, namespace, doc)
    wait_for(lambda: rayjob(kube, namespace), what="the RayJob")
    ray = FakeKubeRay(kube, namespace, NAME)
    ray.initializing()
    ray.submitted()
    ray.running()
    wait_for(phase_is(kube, namespace, "Running"), what="Running")

    def exported_at(rollout: int) -> None:
        wait_for(
            lambda: (job(kube, namespace)["status"].get("adapter") or {}).get("rollout") == rollout, timeout=60, what=f"status.adapter at rollout {rollout}"
        )

    # three saves, each exported: once the second and the third succeeded, the one before goes
    for rollout in (9, 19, 29):
        _checkpoint(kube, namespace, rollout)
        wait_for(lambda r=rollout: _saved(kube, namespace, r), timeout=60, what=f"the export at the save of rollout {rollout}")
        _end_save_export(kube, namespace, tmp_path, rollout, ok=True)
        exported_at(rollout)
        wait_for(lambda r=rollout: _saved_rollouts(kube, namespace) == [r], timeout=60, what=f"only rollout {rollout}'s export Job left")
    assert _export_pods_of(kube, namespace, 9) == [] and _export_pods_of(kube, namespace, 19) == []  # their pods went with them
    assert kube.get("v1", "ConfigMap", namespace, f"{NAME}-export-r0000009") is None and kube.get("v1", "ConfigMap", namespace, f"{NAME}-export-r0000029")
    # the Event follows the deletion the wait above saw: waited for, not read at once
    deleted = wait_for(lambda: _deletion_events(kube, namespace, 2), timeout=30, what="two SavedExportDeleted Events")
    assert sorted(e["message"].split(" ")[3] for e in deleted) == [f"{NAME}-export-r0000009", f"{NAME}-export-r0000019"]
    assert all("exported); kept: rollout" in e["message"] for e in deleted)

    # a failed one stays (it says why) beside the newest success; then one in flight beside both
    _checkpoint(kube, namespace, 39)
    wait_for(lambda: _saved(kube, namespace, 39), timeout=60, what="the export at the save of rollout 39")
    _end_save_export(kube, namespace, tmp_path, 39, ok=False)
    wait_for(lambda: "Failed" in conditions((_saved(kube, namespace, 39) or {}).get("status") or {}), timeout=60, what="the export at rollout 39 failed")
    _checkpoint(kube, namespace, 49)
    wait_for(lambda: _saved(kube, namespace, 49), timeout=60, what="the export at the save of rollout 49")
    assert _saved_rollouts(kube, namespace) == [29, 39, 49]
    # the one in flight succeeds: the older success and the failure go
    _end_save_export(kube, namespace, tmp_path, 49, ok=True)
    exported_at(49)
    wait_for(lambda: _saved_rollouts(kube, namespace) == [49], timeout=60, what="only rollout 49's export Job left")
    events = wait_for(lambda: _deletion_events(kube, namespace, 4), timeout=30, what="the SavedExportDeleted Events of rollouts 29 and 39")
    failed = next(e["message"] for e in events if "r0000039" in e["message"])
    assert "failed, SaveIncomplete" in failed

    # the last save (rollout numRollouts - 1 = 99) is not exported while the run goes on: the final export is that one
    seen = count_reconciles(operator, namespace, "): phase Running")
    _checkpoint(kube, namespace, 99)
    wait_for(lambda: count_reconciles(operator, namespace, "): phase Running") > seen, timeout=60, what="a reconcile after the last save")
    assert _saved_rollouts(kube, namespace) == [49]
