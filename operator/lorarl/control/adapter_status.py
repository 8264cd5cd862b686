"""status.adapter and the AdapterExported condition from the export Job and its pods: pure.

The export pod says what happened in its termination message (lorarl.adapter.export: one JSON
line, {"ok": true, "adapter": {...}} or {"ok": false, "reason", "message"}). Until the Job has
used its retries a failed attempt is Unknown (Retrying); after, False with the pod's reason, and
the job is Stalled (AdapterExportFailed): kstatus reads that as Failed, Argo CD as Degraded
(docs/adapters.md). The reconcile (``control/reconcile.py``) calls it for a Succeeded job with
spec.export, with the export Job and the pods labelled as its (``export_pods``); a final state
(True or False) is kept as written (``written_state``): the export runs once."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import pydantic

from ..api import types as api
from ..job import export_job
from ..job.render import COMPONENT_LABEL
from ..reporter.text import printable

ADAPTER_EXPORTED = "AdapterExported"
EXPORT_FAILED_STALL = "AdapterExportFailed"
EXPORTING = "Exporting"


class ExportState(NamedTuple):
    status: api.ConditionStatus
    reason: str
    message: str
    adapter: dict[str, Any] | None  # status.adapter, when exported
    stalled: bool  # the export failed for good: not Healthy


def job_condition(job: dict[str, Any], type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in (job.get("status") or {}).get("conditions") or [])


def pod_reports(pods: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any] | None, dict[str, Any]]]:
    """(pod name, parsed report or None, terminated state) of every terminated container of a
    one-off Job's pods (the export's, the load's: each reports in its termination message), oldest first."""
    out = []
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (cs.get("state") or {}).get("terminated")
            if not ended:
                continue
            try:
                report = json.loads(ended.get("message") or "")
            except ValueError:
                report = None
            out.append(((pod.get("metadata") or {}).get("name", "?"), report if isinstance(report, dict) else None, ended))
    return out


def _why(pod: str, report: dict[str, Any] | None, ended: dict[str, Any]) -> tuple[str, str]:
    if report is not None and report.get("ok") is False:
        return printable(report.get("reason") or "ExportFailed"), printable(report.get("message") or "")
    return "ExportPodFailed", printable(f"pod {pod} exited {ended.get('exitCode')} ({ended.get('reason') or 'no report'}) without a report")


def export_state(export_job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> ExportState:
    """What the condition and status.adapter say, given the export Job (None: not created yet)."""
    if export_job is None:
        return ExportState("Unknown", EXPORTING, "the export Job is being created", None, False)
    reports = pod_reports(pods)
    for _pod, report, _ended in reversed(reports):
        if report is not None and report.get("ok") is True:
            try:
                adapter = api.AdapterStatus.model_validate(report.get("adapter") or {}).model_dump(by_alias=True, exclude_none=True)
            except pydantic.ValidationError as err:
                return ExportState("False", "UnreadableReport", f"pod {_pod}'s report does not fit status.adapter ({err.error_count()} errors)", None, True)
            said = printable(f"{adapter.get('uri')} ({adapter.get('digest')}, rollout {adapter.get('rollout')})")
            return ExportState("True", "Exported", said, adapter, False)
    if job_condition(export_job, "Failed"):
        reason, message = _why(*reports[-1]) if reports else ("ExportPodFailed", "the export Job failed before its pod ran")
        return ExportState("False", reason, message, None, True)
    if reports:
        reason, message = _why(*reports[-1])
        return ExportState("Unknown", "Retrying", f"{reason}: {message}", None, False)
    return ExportState("Unknown", EXPORTING, f"the export Job {export_job.get('metadata', {}).get('name')} runs", None, False)


def _conditions(job_status: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in job_status.get("conditions") or [] if isinstance(c, dict)]


def written(job_status: dict[str, Any]) -> str | None:
    """The AdapterExported status written on the job (None: no export asked or begun)."""
    return next((c.get("status") for c in _conditions(job_status) if c.get("type") == ADAPTER_EXPORTED), None)


def exporting(job_status: dict[str, Any]) -> bool:
    """The job's export (or the load of its adapter into a server, AdapterServed) has begun and
    not ended: a finished job the operator still follows (it is not settled, its TTL deletion waits)."""
    served = next((c.get("status") for c in _conditions(job_status) if c.get("type") == "AdapterServed"), None)  # control/serve_status.py
    return written(job_status) == "Unknown" or served == "Unknown"


def written_state(job_status: dict[str, Any]) -> ExportState | None:
    """The final state already written (True or False), kept as it is: None while none is."""
    cond = next((c for c in _conditions(job_status) if c.get("type") == ADAPTER_EXPORTED), None)
    if cond is None or cond.get("status") not in ("True", "False"):
        return None
    adapter = job_status.get("adapter") if cond["status"] == "True" else None
    return ExportState(cond["status"], str(cond.get("reason") or ""), str(cond.get("message") or ""), adapter, cond["status"] == "False")


def export_pods(pods: list[dict[str, Any]], rollout: int | None = None) -> list[dict[str, Any]]:
    """The export Job's pods among a job's cached pods (the Ray pods carry the job label too): the
    export after Succeeded's, or those of the export at the save of ``rollout`` (spec.export.onSave)."""
    want = None if rollout is None else str(rollout)
    return [
        p
        for p in pods
        if (labels := (p.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL) == export_job.COMPONENT
        and labels.get(export_job.ROLLOUT_LABEL) == want
    ]


def finished(job: dict[str, Any]) -> bool:
    return job_condition(job, "Complete") or job_condition(job, "Failed")


def saved_exports(jobs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The exports at a save among a job's export Jobs: rollout -> Job."""
    out = {}
    for job in jobs:
        value = ((job.get("metadata") or {}).get("labels") or {}).get(export_job.ROLLOUT_LABEL)
        if value is not None and value.isdigit():
            out[int(value)] = job
    return out


def newest_saved_adapter(saved: dict[int, dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """status.adapter of the newest export at a save that succeeded (None: none yet)."""
    for rollout in sorted(saved, reverse=True):
        state = export_state(saved[rollout], export_pods(pods, rollout))
        if state.status == "True":
            return state.adapter
    return None


class Superseded(NamedTuple):
    rollout: int
    job: dict[str, Any]
    state: ExportState  # what it did (the Event of its deletion says so)


def superseded_saved_exports(saved: dict[int, dict[str, Any]], pods: list[dict[str, Any]], final_exported: bool = False) -> list[Superseded]:
    """The exports at saves whose Jobs to delete (docs/adapters.md, "How many export Jobs stay"),
    oldest first. Only ended Jobs (Complete or Failed; one in flight stays): every one older than
    the newest that succeeded (all of them once the final export succeeded: ``final_exported``);
    of the failed ones newer than that, all but the newest (the newest failure stays to say why)."""
    states = {r: export_state(job, export_pods(pods, r)) for r, job in saved.items()}
    ended = sorted(r for r, job in saved.items() if finished(job))
    newest_ok = max((r for r in saved if states[r].status == "True"), default=-1)
    failed_after = [r for r in ended if r > newest_ok and states[r].status == "False"]
    go = [r for r in ended if final_exported or r < newest_ok or r in failed_after[:-1]]
    return [Superseded(r, saved[r], states[r]) for r in go]


def next_save_to_export(saved: dict[int, dict[str, Any]], latest_complete: Any, num_rollouts: int | None = None) -> int | None:
    """The rollout whose save to export now: the newest complete one (status.checkpoints.latestIteration),
    when no export at a save is running and none was made for it or a newer one (one at a time;
    saves completed meanwhile are skipped, the newest is what matters). Never the last save
    (rollout ``num_rollouts - 1``: miles saves after the last rollout too, train.py:121-125 per
    /work/shared/reference/miles-lora-checkpoints-and-logs.md): the export after Succeeded is that one."""
    if not isinstance(latest_complete, int) or isinstance(latest_complete, bool) or latest_complete < 0:
        return None
    if num_rollouts is not None and latest_complete >= num_rollouts - 1:
        return None
    if any(not finished(job) for job in saved.values()) or latest_complete <= max(saved, default=-1):
        return None
    return latest_complete
