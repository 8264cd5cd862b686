"""The pure mapping of the export Job and its pods' termination messages to status.adapter and
AdapterExported; the reports are produced by the real exporter (lorarl.adapter.export)."""

from __future__ import annotations

import datetime
import json

from lorarl.adapter import export
from lorarl.api import types as api
from lorarl.control.adapter_status import export_state
from lorarl.job import export_plan

from tests.adapter import saves

JOB = {"metadata": {"name": "tiny-lora-export"}, "status": {}}
FAILED_JOB = {"metadata": {"name": "tiny-lora-export"}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}


def pod(name, message, code, created="2026-12-02T03:00:00Z"):
    term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"containerStatuses": [{"name": "export", "state": {"terminated": term}}]}}


def report(tmp_path, **write):
    saves.write_save(str(tmp_path / "ckpt"), 99, **write)
    j = api.LoraRLJob.model_validate(saves.tiny_job_doc(export={"destinations": [{"claim": {"claimName": "served"}}]}))
    now = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
    return export.termination_message(export.run(export_plan.export_plan(j), saves.STATUS, str(tmp_path / "ckpt"), now, claim_root=str(tmp_path / "mnt")))


def test_an_exported_adapter_becomes_status_adapter(tmp_path):
    state = export_state(JOB, [pod("p1", report(tmp_path), 0)])
    assert (state.status, state.reason, state.stalled) == ("True", "Exported", False)
    assert state.adapter["uri"].startswith("pvc://served/") and state.adapter["digest"].startswith("sha256:") and state.adapter["rollout"] == 99
    assert api.LoraRLJobStatus.model_validate({"adapter": state.adapter}).adapter.raw_reward == 0.7


def test_a_refused_export_is_retrying_until_the_job_gives_up_then_false_and_stalled(tmp_path):
    line = report(tmp_path, states=False)
    retrying = export_state(JOB, [pod("p1", line, 1)])
    assert (retrying.status, retrying.reason, retrying.stalled) == ("Unknown", "Retrying", False) and "SaveIncomplete" in retrying.message
    failed = export_state(FAILED_JOB, [pod("p1", line, 1), pod("p2", line, 1, "2026-12-02T03:01:00Z")])
    assert (failed.status, failed.reason, failed.stalled) == ("False", "SaveIncomplete", True)
    assert failed.adapter is None


def test_a_pod_that_died_without_a_report_is_named():
    state = export_state(
        FAILED_JOB, [{"metadata": {"name": "p1"}, "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}]
    )
    assert (state.status, state.reason) == ("False", "ExportPodFailed") and "p1 exited 137 (OOMKilled" in state.message


def test_running_or_not_yet_created_is_unknown():
    assert export_state(None, []).status == "Unknown"
    assert export_state(JOB, []).reason == "Exporting"
    assert json.loads(json.dumps(export_state(JOB, [])._asdict()))  # plain values only


def _job_of(rollout: int, *done: str) -> dict:
    conds = [{"type": c, "status": "True"} for c in done]
    return {"metadata": {"name": f"j-export-r{rollout:07d}", "labels": {"lorarl.dev/export-rollout": str(rollout)}}, "status": {"conditions": conds}}


def test_the_next_save_to_export_is_the_newest_complete_one_when_none_runs():
    from lorarl.control.adapter_status import next_save_to_export, saved_exports

    assert next_save_to_export({}, 49) == 49
    assert next_save_to_export({}, None) is None and next_save_to_export({}, True) is None
    assert next_save_to_export(saved_exports([_job_of(49)]), 59) is None  # one runs
    assert next_save_to_export(saved_exports([_job_of(49, "Complete")]), 59) == 59
    assert next_save_to_export(saved_exports([_job_of(49, "Failed")]), 59) == 59  # a failed one: the next save gets its own
    assert next_save_to_export(saved_exports([_job_of(59, "Complete")]), 59) is None  # made already
    assert next_save_to_export(saved_exports([_job_of(59, "Complete")]), 49) is None  # never an older save
    assert saved_exports([{"metadata": {"name": "j-export", "labels": {}}}]) == {}  # the final export is not one
    assert next_save_to_export({}, 98, num_rollouts=100) == 98
    assert next_save_to_export({}, 99, num_rollouts=100) is None  # the last save: the export after Succeeded is that one


def test_the_final_exports_pods_are_not_an_export_at_a_saves():
    from lorarl.control.adapter_status import export_pods

    def pod(name, **labels):
        return {"metadata": {"name": name, "labels": {"app.kubernetes.io/component": "export", **labels}}}

    final, at_save = pod("final"), pod("at-save", **{"lorarl.dev/export-rollout": "49"})
    assert export_pods([final, at_save]) == [final] and export_pods([final, at_save], 49) == [at_save]


def test_an_export_pod_beside_the_run_is_not_the_runs_pod_trouble():
    from lorarl.control import pods
    from lorarl.control.reconcile import training_pods

    pending = {"metadata": {"name": "j-export-r0000049-abcde", "labels": {"app.kubernetes.io/component": "export"}}}
    pending["status"] = {"phase": "Pending", "containerStatuses": [{"name": "export", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "x"}}}]}
    assert pods.diagnose([pending]) is not None  # as trouble it would be reported, were it the run's
    assert training_pods([pending]) == []


def test_only_the_newest_export_at_a_save_that_succeeded_stays_with_those_in_flight_and_the_newest_failure(tmp_path):
    """The reports are the real exporter's for a save of each rollout (tests/helpers.exporter_report)."""
    from lorarl.control.adapter_status import saved_exports, superseded_saved_exports

    from tests.helpers import exporter_report

    def at_save(rollout: int, ok: bool, *done: str) -> tuple[dict, dict]:
        line = exporter_report(tmp_path / f"r{rollout}-{ok}", rollout=rollout, at_save=True, **({} if ok else {"states": False}))
        p = pod(f"j-export-r{rollout:07d}-x", line, 0 if ok else 1)
        p["metadata"]["labels"] = {"app.kubernetes.io/component": "export", "lorarl.dev/export-rollout": str(rollout)}
        return _job_of(rollout, *done), p

    def gone(*made: tuple[dict, dict], final: bool = False) -> list[tuple[int, str]]:
        saved = saved_exports([j for j, _ in made])
        return [(s.rollout, s.state.status) for s in superseded_saved_exports(saved, [p for _, p in made], final)]

    ok9, ok19, ok29 = at_save(9, True, "Complete"), at_save(19, True, "Complete"), at_save(29, True, "Complete")
    bad39, bad49, running59 = at_save(39, False, "Failed"), at_save(49, False, "Failed"), (_job_of(59), pod("none", "", 0))
    assert gone(ok9) == [] and gone(bad39) == []  # the newest that succeeded stays; so does a failure with none newer
    assert gone(ok9, ok19, ok29) == [(9, "True"), (19, "True")]
    bad19 = at_save(19, False, "Failed")
    assert gone(ok9, bad19, ok29) == [(9, "True"), (19, "False")]  # a failure goes once a newer one succeeded
    assert gone(bad39, ok9) == []  # a failure newer than the newest success stays (it says why)
    assert gone(ok9, bad39, bad49) == [(39, "False")]  # of failures after it, the newest says why
    assert gone(ok29, bad39, ok19) == [(19, "True")]
    assert gone(ok9, ok19, running59) == [(9, "True")]  # one in flight stays
    assert gone(bad39, ok9, running59, final=True) == [(9, "True"), (39, "False")]  # the final export succeeded: all that ended
