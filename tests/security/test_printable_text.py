"""Text from outside reaches the status, the Events and the log printable (issue 35, finding 4;
lorarl/reporter/text.py): every entry point that copies a job's, KubeRay's, the kubelet's, Kueue's or
a pod's text passes it through ``printable``, and so do the sinks (the condition setter, the Event,
the Event recorder, the operator's log handlers). Each test feeds one entry point the same hostile
text: ESC sequences, BEL, U+202E (right-to-left override), U+200B (zero-width space), NUL, a C1
control (U+009B, CSI), a lone surrogate, a line break and a tab."""

from __future__ import annotations

import io
import json
import logging

import pytest
from lorarl.control import adapter_status, pods, queueing, serve_status, status
from lorarl.control.health import Verdict
from lorarl.reporter import logparse, summary, text
from lorarl.reporter.text import is_printable, printable
from lorarl.runtime.events import EventRecorder

HOSTILE = "boom \x1b[31mred\x1b[0m\x07 \u202eevil\u200b\x00\x9b\ud800 here\tand\nthere"
SAID = "boom red evil here"  # what must still be read


def clean(value: str) -> bool:
    return is_printable(value) and "\x1b" not in value and "[31m" not in value


def test_printable_drops_controls_and_format_characters_and_keeps_one_line():
    assert printable(HOSTILE) == "boom red evil here and there"
    assert printable("a\r\nb\u2028c\x85d\x0be") == "a  b c d e"  # each break one space
    assert printable("Grüße, 日本語 — ok") == "Grüße, 日本語 — ok"  # printable text unchanged
    assert printable("\x1b]0;title\x07x") == "x"  # an OSC (window title) dropped whole
    assert printable(None) == "" and printable(HOSTILE, 4) == "boom"
    assert is_printable(printable(HOSTILE)) and not is_printable(HOSTILE)


def rayjob(message: str) -> dict:
    return {
        "metadata": {"name": "job-a"},
        "spec": {},
        "status": {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed\u202e", "message": message},
    }


def facts(**kw) -> status.Facts:
    return status.Facts(generation=1, now="2026-01-01T00:00:00Z", user_suspended=False, queue_name=None, verdict=Verdict("True", "Healthy", "ok"), **kw)


def test_the_rayjob_message_reaches_the_mirror_the_conditions_and_the_events_printable():
    out, events = status.compute({"phase": "Running"}, rayjob(HOSTILE), facts())
    assert SAID in out["rayJob"]["message"] and clean(out["rayJob"]["message"])
    assert clean(out["rayJob"]["reason"])
    failed = next(c for c in out["conditions"] if c["type"] == "Failed")
    assert SAID in failed["message"] and clean(failed["message"]) and clean(failed["reason"])
    assert events and all(clean(e.message) and clean(e.reason) for e in events)
    assert any(SAID in e.message for e in events)


def test_the_condition_setter_and_the_event_clean_any_text():
    cond = status.setcondition([], "Ready", "False", "Why\u200b", HOSTILE, "2026-01-01T00:00:00Z", 1)
    assert cond["reason"] == "Why" and clean(cond["message"])
    event = status.Event("Warning", "Odd\x07", HOSTILE)
    assert event.reason == "Odd" and clean(event.message)


def test_pod_diagnosis_messages_are_printable():
    pod = {
        "metadata": {"name": "job-a-head\u202e"},
        "spec": {"images": {}},
        "status": {
            "containerStatuses": [{"name": "ray-head", "state": {"waiting": {"reason": "CreateContainerConfigError", "message": HOSTILE}}}],
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": HOSTILE}],
        },
    }
    trouble = pods.diagnose([pod])
    assert trouble is not None and clean(trouble.message) and "there" in trouble.message  # the last line of a log tail
    unschedulable = pods.diagnose([{**pod, "status": {"conditions": pod["status"]["conditions"]}}])
    assert unschedulable is not None and SAID in unschedulable.message and clean(unschedulable.message)


def terminated_pod(report: dict) -> dict:
    ended = {"exitCode": 1, "reason": "Error", "message": json.dumps(report)}
    return {
        "metadata": {"name": "exp", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"containerStatuses": [{"name": "c", "state": {"terminated": ended}}]},
    }


FAILED_JOB = {"metadata": {"name": "job-a-export"}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}


def test_export_and_load_pod_messages_are_printable():
    pod = terminated_pod({"ok": False, "reason": "Refused\u202e", "message": HOSTILE})
    exported = adapter_status.export_state(FAILED_JOB, [pod])
    served = serve_status.serve_state(FAILED_JOB, [pod])
    for state in (exported, served):
        assert state.status == "False" and SAID in state.message and clean(state.message) and state.reason == "Refused"


def test_kueue_messages_are_printable():
    workload = {
        "metadata": {"name": "wl"},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "message": HOSTILE},
                {"type": "Evicted", "status": "True", "reason": "Preempted", "message": HOSTILE},
            ]
        },
    }
    adm = queueing.admission(workload, "cq")
    assert clean(adm.pending_message) and clean(adm.evicted_message) and SAID in adm.pending_message


class FakeKube:
    def __init__(self):
        self.posted = []

    def post_event(self, involved, type_, reason, message, now, now_micro):
        self.posted.append((reason, message))
        return {"metadata": {"name": f"e{len(self.posted)}"}, "count": 1}


def test_the_event_recorder_posts_printable_text():
    kube = FakeKube()
    involved = {"apiVersion": "lorarl.dev/v1alpha1", "kind": "LoraRLJob", "metadata": {"namespace": "ns", "name": "a", "uid": "u"}}
    EventRecorder(kube).record(involved, "Warning", "Odd\u200b", HOSTILE, "t", "t")
    (reason, message), *_ = kube.posted
    assert reason == "Odd" and clean(message) and SAID in message


@pytest.mark.parametrize("url", ["https://wandb.ai/t/p/runs/x\u202eyz", "https://wandb.ai/t/p/runs/x\x07", "https://wandb.ai/t/p/runs/x\u200b"])
def test_the_reporter_shows_no_wandb_url_that_is_not_printable(url):
    s = summary.Summary(10)
    event = logparse.parse_line(f"wandb: 🚀 View run job-a at: {url}")
    assert event is not None and event.kind == "wandb"  # the log parser takes it
    s.apply(event)
    assert "tracking" not in s.status()
    s.apply(logparse.parse_line("wandb: 🚀 View run job-a at: https://wandb.ai/t/p/runs/ok"))
    assert s.status()["tracking"] == {"wandbRunURL": "https://wandb.ai/t/p/runs/ok"}


def test_the_log_filter_makes_every_line_printable():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("lorarl.test.printable")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        text.install_log_filter(logger)
        text.install_log_filter(logger)  # once per handler
        assert sum(isinstance(f, text.LogFilter) for f in handler.filters) == 1
        logger.warning("%s/%s: %s", "ns", "job", HOSTILE)
    finally:
        logger.removeHandler(handler)
    line = stream.getvalue()
    assert line == "ns/job: boom red evil here and there\n"


def test_the_operator_command_installs_the_log_filter():
    # the run command adds the filter to the root handlers right after kopf configured them
    import inspect

    from lorarl import cli

    source = inspect.getsource(cli)
    assert source.index("text.install_log_filter()") > source.index("runner.configure_logging(")
