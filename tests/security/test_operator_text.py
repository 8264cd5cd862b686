"""The operator's own fields carry only operator-made text: with the operator as a real process on
the real API server, a failure message that holds the job's text (KubeRay copies the tail of the
driver's log into RayJob.status.message on AppFailed) reaches status.rayJob.message, the Failed
condition and the Event as one short, redacted line and a pointer to the rest; an eval name the
job made up never reaches the TrainingHealthy message."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from lorarl_dev.operatorproc import OperatorProcess

from tests.helpers import NAME, apply_job, job, phase_is, running, seed_doc, wait_for

pytestmark = pytest.mark.controlplane

PLANTED_KEY = "0123456789abcdef0123456789abcdef01234567"
DRIVER_TAIL = (
    f"RuntimeError: boom WANDB_API_KEY={PLANTED_KEY} api_key: hunter2-not-shaped\n"
    + "\n".join(f"log line {i} with planted-secret-{i}" for i in range(200))
    + f"\nwandb login {PLANTED_KEY}\n"
)


@pytest.fixture
def operator(control_plane, namespace, tmp_path):
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    yield op
    op.stop()
    op.assert_no_tracebacks()


def failed_event_messages(kube, namespace) -> list[str]:
    core = k8s.CoreV1Api(kube.client)
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={NAME},involvedObject.kind=LoraRLJob").items
    return [e.message or "" for e in items if e.reason == "Failed"]


def test_a_failure_message_reaches_the_operators_fields_short_and_redacted(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    ray = running(kube, namespace)
    ray.app_failed(message=DRIVER_TAIL)
    st = wait_for(phase_is(kube, namespace, "Failed"), what="Failed")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["message"].startswith("RuntimeError: boom WANDB_API_KEY=[redacted] api_key: [redacted]"), failed["message"]
    assert f"kubectl logs job/{NAME}" in failed["message"] and len(failed["message"]) < 300
    events = wait_for(lambda: failed_event_messages(kube, namespace), what="the Failed Event")
    texts = [st["rayJob"].get("message", ""), *(c["message"] for c in st["conditions"]), *events]
    assert any("RuntimeError: boom" in t for t in events), events
    for text in texts:
        assert PLANTED_KEY not in text and "hunter2" not in text and "planted-secret" not in text, text


def test_an_eval_name_the_job_made_up_is_not_judged(control_plane, namespace, kube, operator):
    doc = seed_doc()
    doc["spec"]["health"] = {"minEvalScore": 0.5}
    apply_job(control_plane, namespace, doc)
    running(kube, namespace)
    step = {"progress": {"rollout": 5}, "metrics": {"step": 5, "trainRolloutLogprobAbsDiffMean": 0.01}}
    made_up = {"name": "planted-" + PLANTED_KEY[:8], "latest": 0.1, "latestRollout": 5, "best": 0.1, "bestRollout": 5}
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {**step, "eval": [made_up]})
    healthy = wait_for(
        lambda: next((c for c in job(kube, namespace)["status"].get("conditions", []) if c["type"] == "TrainingHealthy" and c["status"] != "Unknown"), None),
        what="a health verdict",
    )
    assert healthy["status"] == "True" and "planted" not in healthy["message"], healthy
    # the spec's own eval set, as low, is judged and named
    kube.patch_status("lorarl.dev/v1alpha1", "LoraRLJob", namespace, NAME, {"eval": [made_up, {**made_up, "name": "aime24"}]})
    unhealthy = wait_for(
        lambda: next((c for c in job(kube, namespace)["status"]["conditions"] if c["type"] == "TrainingHealthy" and c["status"] == "False"), None),
        what="EvalScoreTooLow",
    )
    assert unhealthy["reason"] == "EvalScoreTooLow" and "eval/aime24" in unhealthy["message"] and "planted" not in unhealthy["message"]


# issue 35, finding 4: terminal escapes, BEL, a right-to-left override and a zero-width space in
# the driver's text (what KubeRay copies into RayJob.status.message), and a tab
HOSTILE_TAIL = "RuntimeError: \x1b[31mboom\x1b[0m\x07 \u202ereversed\u200b\tend\nsecond line\n"


def test_a_failure_message_reaches_the_status_and_the_events_printable(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    ray = running(kube, namespace)
    ray.app_failed(message=HOSTILE_TAIL)
    st = wait_for(phase_is(kube, namespace, "Failed"), what="Failed")  # as the API server stored it
    events = wait_for(lambda: failed_event_messages(kube, namespace), what="the Failed Event")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["message"].startswith("RuntimeError: boom reversed end ... (the full text"), failed["message"]
    texts = [st["rayJob"]["message"], st["rayJob"]["reason"], *(c["message"] for c in st["conditions"]), *events, operator.output()]
    assert any("RuntimeError: boom reversed end" in t for t in events), events
    for text in texts:
        assert not any(ch in text for ch in "\x1b\x07\u202e\u200b\t"), repr(text)
