"""status.serving and the AdapterServed condition from the load Job and its pods: pure.

The load pod reports in its termination message (lorarl/serving/loader.py: one JSON line,
{"ok": true, "serving": {...}} or {"ok": false, "reason", "message"}). While the Job may retry
(the server could not be reached) a failed attempt is Unknown (Retrying); once the Job failed
(a refusal fails it at once, podFailurePolicy) it is False with the pod's reason, and the job is
Stalled (AdapterServeFailed) as for a failed export. A final state is kept as written: the load
runs once per export. The reconcile calls it after AdapterExported is True."""

from __future__ import annotations

from typing import Any, NamedTuple

import pydantic

from ..api import types as api
from ..job.render import COMPONENT_LABEL
from ..reporter.text import printable
from ..serving import serve_job
from . import adapter_status

ADAPTER_SERVED = "AdapterServed"
SERVE_FAILED_STALL = "AdapterServeFailed"
LOADING = "Loading"
MESSAGE_LIMIT = 1024


class ServeState(NamedTuple):
    status: api.ConditionStatus
    reason: str
    message: str
    serving: dict[str, Any] | None  # status.serving, when served
    stalled: bool  # the load failed for good: not Healthy


def _why(pod: str, report: dict[str, Any] | None, ended: dict[str, Any]) -> tuple[str, str]:
    if report is not None and report.get("ok") is False:
        return printable(report.get("reason") or "LoadFailed", 128), printable(report.get("message") or "", MESSAGE_LIMIT)
    return "LoadPodFailed", printable(f"pod {pod} exited {ended.get('exitCode')} ({ended.get('reason') or 'no report'}) without a report")


def serve_state(load_job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> ServeState:
    """What the condition and status.serving say, given the load Job (None: not created yet)."""
    if load_job is None:
        return ServeState("Unknown", LOADING, "the load Job is being created", None, False)
    reports = adapter_status.pod_reports(pods)
    for pod, report, _ended in reversed(reports):
        if report is not None and report.get("ok") is True:
            try:
                serving = api.ServingStatus.model_validate(report.get("serving") or {}).model_dump(by_alias=True, exclude_none=True)
            except pydantic.ValidationError as err:
                return ServeState("False", "UnreadableReport", f"pod {pod}'s report does not fit status.serving ({err.error_count()} errors)", None, True)
            said = printable(f"{serving.get('name')} at {serving.get('server')} ({serving.get('path')})")
            return ServeState("True", "Served", said, serving, False)
    if adapter_status.job_condition(load_job, "Failed"):
        reason, message = _why(*reports[-1]) if reports else ("LoadPodFailed", "the load Job failed before its pod ran")
        return ServeState("False", reason, message, None, True)
    if reports:
        reason, message = _why(*reports[-1])
        return ServeState("Unknown", "Retrying", f"{reason}: {message}"[:MESSAGE_LIMIT], None, False)
    return ServeState("Unknown", LOADING, f"the load Job {load_job.get('metadata', {}).get('name')} runs", None, False)


def waiting_for_path() -> ServeState:
    """status.adapter does not name the export's claim destination: there is nothing to load."""
    return ServeState(
        "False",
        "NoAdapterPath",
        "status.adapter names no directory on the export's claim destination: give spec.serve.adapterPath",
        None,
        True,
    )


def _condition(job_status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in job_status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == ADAPTER_SERVED), None)


def written(job_status: dict[str, Any]) -> str | None:
    """The AdapterServed status written on the job (None: no load asked or begun)."""
    cond = _condition(job_status)
    return cond.get("status") if cond else None


def written_state(job_status: dict[str, Any]) -> ServeState | None:
    """The final state already written (True or False), kept as it is: None while none is."""
    cond = _condition(job_status)
    if cond is None or cond.get("status") not in ("True", "False"):
        return None
    serving = job_status.get("serving") if cond["status"] == "True" else None
    return ServeState(cond["status"], str(cond.get("reason") or ""), str(cond.get("message") or ""), serving, cond["status"] == "False")


def load_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The load Job's pods among a job's cached pods."""
    return [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL) == serve_job.COMPONENT]
