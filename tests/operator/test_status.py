"""Pure status mapping: every KubeRay state and reason maps to a defined LoraRLJob state."""

from __future__ import annotations

import pytest
from lorarl.control import pods, status
from lorarl.control.health import Verdict

from tests.operator.status_table import BAD, NOW, OK, REFUSED, TABLE, T, computed, facts, rayjob


def conds(st):
    return {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}


@pytest.mark.parametrize("case", TABLE)
def test_mapping_table(case):
    phase, ready, ready_reason, reconciling, stalled, succeeded, failed, suspended, _ = TABLE[case][2:]
    out = computed(case)
    c = {cond["type"]: cond for cond in out["conditions"]}
    assert out["phase"] == phase
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == (ready, ready_reason)
    got = tuple(c[t]["status"] for t in ("Reconciling", "Stalled", "Succeeded", "Failed", "Suspended"))
    assert got == (reconciling, stalled, succeeded, failed, suspended)
    export, serve = TABLE[case][1].get("export"), TABLE[case][1].get("serve")
    if T in (reconciling, stalled):  # kstatus reports the True one's reason; it must say why
        # (after an export's start Ready keeps the run's reason, the True one says the export's, then the load's: docs/status.md)
        if serve is not None:
            why = "AdapterServeFailed" if serve.stalled else serve.reason
        else:
            why = ready_reason if export is None else "AdapterExportFailed" if export.stalled else export.reason
        assert c["Reconciling" if reconciling == T else "Stalled"]["reason"] == why
    assert out["observedGeneration"] == 3
    assert all(cond["observedGeneration"] == 3 for cond in out["conditions"])
    queued = TABLE[case][1].get("admission") is not None  # Kueue's Admitted, for queued jobs only
    extra = (["Admitted"] if queued else []) + (["AdapterExported"] if export is not None else []) + (["AdapterServed"] if serve is not None else [])
    assert list(c) == ["Ready", "Reconciling", "Stalled", "Succeeded", "Failed", "Suspended", "TrainingHealthy", *extra]


def test_table_follows_kstatus_rules():
    """The hand-written kstatus column agrees with the condition columns (the real library
    checks the computed statuses in tests/gitops/test_kstatus.py)."""
    for case, row in TABLE.items():
        ready, reconciling, stalled, want = row[3], row[5], row[6], row[10]
        assert not (reconciling == T and stalled == T), case
        assert want == ("InProgress" if reconciling == T else "Failed" if stalled == T else "Current" if ready == T else "InProgress"), case


def test_failed_reason_and_message_reach_conditions():
    out, events = status.compute({"phase": "Running"}, rayjob("Failed", "FAILED", "DeadlineExceeded", "deadline 172800s exceeded"), facts())
    assert conds(out)["Failed"] == ("True", "DeadlineExceeded")
    assert conds(out)["Stalled"] == ("True", "DeadlineExceeded")
    assert [(e.type, e.reason) for e in events] == [("Warning", "Failed")]
    assert "deadline 172800s exceeded" in events[0].message
    assert out["completionTime"] == NOW


def test_running_ready_and_start_time():
    out, events = status.compute(
        {"phase": "Preparing"}, rayjob("Running", "RUNNING", rayClusterName="j-abcde", dashboardURL="j-head-svc:8265", jobId="j-xyz"), facts(verdict=OK)
    )
    assert conds(out)["Ready"] == ("True", "Training")
    assert out["startTime"] == NOW
    assert out["rayJob"] == {
        "name": "j",
        "rayClusterName": "j-abcde",
        "dashboardURL": "j-head-svc:8265",
        "jobId": "j-xyz",
        "jobStatus": "RUNNING",
        "jobDeploymentStatus": "Running",
    }
    assert [(e.type, e.reason) for e in events] == [("Normal", "Running")]


def test_queued_in_kueue_is_pending_not_suspended():
    out, _ = status.compute({}, rayjob("Suspended"), facts(queue_name="rl-team"))
    assert out["phase"] == "Pending"
    assert conds(out)["Suspended"] == ("True", "Queued")
    assert conds(out)["Reconciling"] == ("True", "Queued")


def test_user_suspend_with_queue_is_suspended():
    out, _ = status.compute({}, rayjob("Suspended"), facts(queue_name="rl-team", user_suspended=True))
    assert out["phase"] == "Suspended" and conds(out)["Suspended"] == ("True", "Suspended")


def test_finished_runs_stay_finished():
    done, _ = status.compute({"phase": "Running"}, rayjob("Complete", "SUCCEEDED", endTime="2026-11-30T09:59:00Z"), facts())
    assert done["completionTime"] == "2026-11-30T09:59:00Z"
    again, events = status.compute(done, None, facts(now="2026-11-30T11:00:00Z"))
    assert again["phase"] == "Succeeded" and again["completionTime"] == "2026-11-30T09:59:00Z"
    assert conds(again)["Succeeded"] == ("True", "Succeeded")
    assert events == []


def test_last_transition_time_moves_only_on_flips():
    first, _ = status.compute({}, rayjob("Initializing"), facts(now="2026-11-30T10:00:00Z"))
    second, _ = status.compute(first, rayjob("Running", "RUNNING"), facts(now="2026-11-30T10:05:00Z", verdict=OK))
    times = {c["type"]: c["lastTransitionTime"] for c in second["conditions"]}
    assert times["Ready"] == "2026-11-30T10:05:00Z"  # False -> True
    assert times["Reconciling"] == "2026-11-30T10:05:00Z"  # True -> False: training is the goal state
    assert times["Failed"] == "2026-11-30T10:00:00Z"  # still False
    assert times["Stalled"] == "2026-11-30T10:00:00Z"  # still False
    third, _ = status.compute(second, rayjob("Running", "RUNNING"), facts(now="2026-11-30T10:09:00Z", verdict=OK))
    assert third["conditions"] == second["conditions"]  # nothing flipped, nothing moved


def test_unhealthy_training_warns_once_and_is_not_ready():
    bad = BAD
    prev, _ = status.compute({"phase": "Running"}, rayjob("Running", "RUNNING"), facts(verdict=OK))
    out, events = status.compute(prev, rayjob("Running", "RUNNING"), facts(verdict=bad))
    assert conds(out)["TrainingHealthy"] == ("False", "LogprobDiffTooHigh")
    assert conds(out)["Ready"] == ("False", "LogprobDiffTooHigh")
    assert [(e.type, e.reason) for e in events] == [("Warning", "LogprobDiffTooHigh")]
    _, again = status.compute(out, rayjob("Running", "RUNNING"), facts(verdict=bad))
    assert again == []


def test_a_node_not_ready_warns_once_keeps_running_and_clears_with_the_node():
    lost = pods.Trouble(pods.NODE_NOT_READY, "pod j-head: its node n1 is not ready", False)
    prev, _ = status.compute({"phase": "Running"}, rayjob("Running", "RUNNING"), facts(verdict=OK))
    out, events = status.compute(prev, rayjob("Running", "RUNNING"), facts(verdict=OK, node_not_ready=lost))
    assert out["phase"] == "Running"
    assert conds(out)["Ready"] == ("False", "NodeNotReady") and conds(out)["Reconciling"] == ("True", "NodeNotReady")
    assert conds(out)["Stalled"][0] == "False"
    assert [(e.type, e.reason, e.message) for e in events] == [("Warning", "NodeNotReady", lost.message)]
    again, more = status.compute(out, rayjob("Running", "RUNNING"), facts(verdict=OK, node_not_ready=lost))
    assert more == []
    back, _ = status.compute(again, rayjob("Running", "RUNNING"), facts(verdict=OK))
    assert conds(back)["Ready"][0] == "True"


def test_a_retry_whose_pods_cannot_start_says_both():
    """The pods' trouble is the reason; the message keeps that an attempt failed, and why."""
    trouble = pods.Trouble(pods.IMAGE_PULL, "pod j-x-head container ray-head: cannot pull image i (ErrImagePull): refused", True)
    prev, _ = status.compute({"phase": "Running"}, rayjob("Running", "RUNNING"), facts(verdict=OK))
    retry = rayjob("Retrying", "FAILED", "AppFailed", "Job entrypoint command failed with exit code 1", failed=1)
    out, events = status.compute(prev, retry, facts(verdict=OK, pod_trouble=trouble))
    assert out["phase"] == "Preparing" and conds(out)["Ready"] == ("False", "ImagePullBackOff")
    expected = f"{trouble.message}; attempt 1 failed (AppFailed); starting a new Ray cluster: Job entrypoint command failed with exit code 1"
    assert next(c["message"] for c in out["conditions"] if c["type"] == "Ready") == expected
    assert ("Preparing", f"Running -> Preparing: ImagePullBackOff: {expected}") in [(e.reason, e.message) for e in events]


def test_startup_timeout_stalls_without_failing():
    out, events = status.compute({"phase": "Preparing"}, rayjob("Initializing"), facts(startup_timed_out=True))
    assert out["phase"] == "Preparing"
    assert conds(out)["Stalled"] == ("True", "StartupTimeout")
    assert conds(out)["Reconciling"][0] == "False"
    assert [e.reason for e in events] == ["StartupTimeout"]


def test_stopped_unhealthy_fails():
    bad = Verdict("False", "LogprobDiffTooHigh", "mean 0.05 >= 0.03")
    out, _ = status.compute({"phase": "Running"}, None, facts(verdict=bad, stopped_unhealthy=True))
    assert out["phase"] == "Failed" and conds(out)["Failed"] == ("True", "StoppedUnhealthy")


def test_invalid_spec_stalls():
    out, _ = status.compute({}, None, facts(invalid_spec="spec.lora.rank: too small"))
    assert conds(out)["Stalled"] == ("True", "InvalidSpec") and out["phase"] == "Pending"


def test_changed():
    out, _ = status.compute({}, rayjob("Initializing"), facts())
    assert status.changed({}, out)
    assert not status.changed({**out, "progress": {"rollout": 3}}, out)  # reporter fields are not ours


def test_every_written_key_is_in_the_schema():
    """A key the CRD does not declare is silently pruned by the API server: catch it here."""
    from lorarl.api import types as api

    rj = rayjob("Running", "RUNNING", rayClusterName="c", dashboardURL="d:8265", jobId="i", failed=1, succeeded=0, reason="AppFailed", message="m")
    out, _ = status.compute({}, rj, facts(verdict=OK))
    parsed = api.LoraRLJobStatus.model_validate(out)
    assert parsed.model_dump(by_alias=True, exclude_none=True, exclude_defaults=False) == {**out, "conditions": out["conditions"]}


# --- a child the API server refuses (ApplyFailed) ---------------------------------------------

# HTTP status -> does it need someone to fix the cluster or the spec? Written from the Kubernetes
# API conventions (api-conventions.md "HTTP Status codes"): 409 Conflict and 429 TooManyRequests
# say "try again", 5xx and 0 (no response) are the server's or the network's trouble.
NEEDS_FIX = {
    400: True,
    401: True,
    403: True,
    404: True,
    405: True,
    409: False,
    410: True,
    415: True,
    422: True,
    429: False,
    0: False,
    500: False,
    502: False,
    503: False,
    504: False,
}


@pytest.mark.parametrize("code", NEEDS_FIX)
def test_which_refusals_need_a_fix(code):
    from lorarl.runtime.kube import ApiError

    err = ApiError(code, "Reason", "message")
    assert err.needs_fix is NEEDS_FIX[code]
    assert not (err.needs_fix and err.transient)


def test_apply_failure_names_the_child_and_its_fields_never_the_servers_words():
    """Issue 35, point 6: a LoraRLJob named after someone else's object must not read that
    object's spec back through its ApplyFailed condition and Event. The message names the child,
    the HTTP status and reason, the Status's cause fields, and a sentence of ours; the server's
    text (a 422 quotes the values it refused, an admission policy or webhook may quote anything)
    goes to the operator's log only."""
    from lorarl.runtime.kube import ApiError, status_parts

    body = {
        "kind": "Status",
        "status": "Failure",
        "reason": "Invalid",
        "message": 'RayJob.ray.io "j" is invalid: spec.entrypoint: Invalid value: "python train.py --token=SECRETofANOTHERteam"',
        "details": {
            "name": "j",
            "kind": "RayJob",
            "causes": [
                {"reason": "FieldValueInvalid", "message": 'Invalid value: "SECRETofANOTHERteam"', "field": "spec.entrypoint"},
                {"reason": "FieldValueInvalid", "message": 'Invalid value: "x"', "field": "spec.entrypoint"},
                {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.rayClusterSpec.headGroupSpec"},
            ],
        },
    }
    reason, fields = status_parts(body)
    err = ApiError(422, "Unprocessable Entity", body["message"], status_reason=reason, fields=fields)
    text = status.apply_failure("RayJob", "ns", "j", err)
    assert text == (
        "applying RayJob ns/j: 422 Unprocessable Entity (Invalid); fields: spec.entrypoint, spec.rayClusterSpec.headGroupSpec; "
        "the API server found it invalid (the API server's answer is in the operator's log)"
    )
    assert "SECRET" not in text and "Invalid value" not in text
    # a 403 (RBAC, or the owned-children policy's words naming the other object) and a webhook's text
    forbidden = ApiError(403, "Forbidden", 'configmaps "j-lorarl" is forbidden: ValidatingAdmissionPolicy denied: data: {"owner": "someone else"}')
    text = status.apply_failure("ConfigMap", "ns", "j-lorarl", forbidden)
    assert text.startswith("applying ConfigMap ns/j-lorarl: 403 Forbidden; the operator may not write it") and "someone else" not in text
    assert "someone else" in status.refusal_text(forbidden)  # the log line keeps the server's words
    many = ApiError(422, "Invalid", "m", fields=tuple(f"spec.f{i}" for i in range(20)))
    text = status.apply_failure("RayJob", "ns", "j", many)
    assert "spec.f7 and 12 more" in text and "spec.f8" not in text and len(text) <= 1024


def test_status_parts_of_odd_bodies():
    from lorarl.runtime.kube import status_parts

    assert status_parts("not a status") == ("", ())
    assert status_parts({"reason": 5, "details": {"causes": "x"}}) == ("", ())
    assert status_parts({"reason": "Invalid", "details": {"causes": [{"field": ""}, "x", {"field": 3}, {"field": "a"}]}}) == ("Invalid", ("a",))


def test_apply_backoff_grows_and_is_bounded():
    assert [status.apply_backoff(r) for r in range(10)] == [5, 10, 20, 40, 80, 160, 300, 300, 300, 300]
    assert status.apply_backoff(10_000) == 300


def test_apply_failed_warns_once_per_refusal_and_clears_by_itself():
    out, events = status.compute({}, None, facts(apply_failed=REFUSED))
    assert conds(out)["Stalled"] == ("True", "ApplyFailed") and conds(out)["Ready"] == ("False", "ApplyFailed")
    assert {c["type"]: c["message"] for c in out["conditions"]}["Stalled"] == REFUSED
    assert [(e.type, e.reason, e.message) for e in events if e.reason == "ApplyFailed"] == [("Warning", "ApplyFailed", REFUSED)]
    again, events = status.compute(out, None, facts(apply_failed=REFUSED, now="2026-11-30T10:05:00Z"))
    assert events == [] and not status.changed(out, again)  # retries: no Event, no write
    other = "applying ConfigMap ns/j-lorarl: 403 Forbidden: configmaps is forbidden"
    third, events = status.compute(again, None, facts(apply_failed=other))
    assert [(e.type, e.reason, e.message) for e in events] == [("Warning", "ApplyFailed", other)]
    fixed, events = status.compute(third, rayjob(""), facts(now="2026-11-30T10:09:00Z"))
    assert conds(fixed)["Stalled"] == ("False", "NoError") and conds(fixed)["Reconciling"] == ("True", "RayJobCreated")
    assert {c["type"]: c["message"] for c in fixed["conditions"]}["Stalled"] == ""
    assert [e.reason for e in events] == []


def _retried(failed, limit, reason="AppFailed", message="Job entrypoint command failed with exit code 1"):
    rj = rayjob("Failed", "FAILED", reason, message, failed=failed)
    rj["spec"] = {"backoffLimit": limit}
    return rj


def test_a_final_failure_after_retries_says_the_attempts_were_used_up():
    """KubeRay fails a RayJob for good once status.failed reaches spec.backoffLimit + 1
    (rayjob_controller.go:486-524, v1.5.0): the message says so before the last attempt's words."""
    out, events = status.compute({"phase": "Preparing"}, _retried(3, 2), facts())
    failed = next(c for c in out["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "AppFailed")
    assert failed["message"].startswith("all 3 attempts failed, no retry left (runPolicy.backoffLimit 2); the last: Job entrypoint")
    assert "all 3 attempts failed" in events[0].message


@pytest.mark.parametrize(
    ("failed", "limit", "reason"),
    [(1, 0, "AppFailed"), (1, None, "AppFailed"), (1, 2, "DeadlineExceeded")],
    ids=["no-retries-allowed", "no-limit", "deadline-is-never-retried"],
)
def test_a_failure_without_spent_retries_keeps_kuberays_message(failed, limit, reason):
    rj = _retried(failed, limit, reason)
    if limit is None:
        rj["spec"] = {}
    out, _ = status.compute({"phase": "Running"}, rj, facts())
    failed_cond = next(c for c in out["conditions"] if c["type"] == "Failed")
    assert failed_cond["message"] == "Job entrypoint command failed with exit code 1"
