"""Chaos: the API server throttles the operator (API Priority and Fairness answers 429), and the
connection to it goes half-open (a proxy stops answering without closing anything).

Both run on a control plane of this module's own (``isolated_plane``), the operator under a
ServiceAccount of its own (``world.operator_identity``) with a 600 s resync: what it fixes it
must have learnt from its watches and its own retries, never from the periodic backstop.
"""

from __future__ import annotations

import datetime
import re
import time

import pytest
import yaml
from lorarl_dev import audit
from lorarl_dev.chaosproxy import ChaosProxy

from tests.chaos.world import apply_jobs, converge, delete_jobs, drive, gone, operator_identity
from tests.helpers import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.controlplane]

THROTTLED_BURST = 40
#: the hang lasts longer than a request's timeout (30 s), shorter than a watch's idle limit (70 s)
HANG_SECONDS = 40


def throttle(plane, namespace: str, name: str) -> None:
    """A priority level of the smallest share with no queues (``Reject``: an API server that
    cannot run a request of this flow at once answers 429 with Retry-After) and a FlowSchema that
    puts every request of ServiceAccount ``<namespace>/operator`` on it. Nominal concurrency:
    ceil(600 server seats x 1 / (245 suggested shares + 1)) = 3 seats (KEP-1040; the suggested
    levels of k8s.io/apiserver@v0.37.2 pkg/apis/flowcontrol/bootstrap/default.go)."""
    docs = [
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}},
            },
        },
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 500,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": "operator", "namespace": namespace}}],
                        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True, "namespaces": ["*"]}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        },
    ]
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def active() -> bool:  # the API server's APF controller has taken the FlowSchema in
        schema = yaml.safe_load(plane.kubectl("get", "flowschema", name, "-o", "yaml").stdout)
        return any(c.get("type") == "Dangling" and c.get("status") == "False" for c in (schema.get("status") or {}).get("conditions", []))

    wait_for(active, timeout=30, what=f"FlowSchema {name} in effect")


def rejected_by_apf(plane, level: str) -> int:
    """apiserver_flowcontrol_rejected_requests_total of one priority level, from /metrics."""
    text = plane.kubectl("get", "--raw", "/metrics").stdout
    pattern = re.compile(r'^apiserver_flowcontrol_rejected_requests_total\{[^}]*priority_level="' + re.escape(level) + r'"[^}]*\} (\S+)$', re.M)
    return int(sum(float(v) for v in pattern.findall(text)))


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def resend_gaps(plane, user: str) -> tuple[int, list[float]]:
    """The operator's 429s in the audit log, and for each one the seconds until the same request
    (verb and URI) was received again: what the operator waited before sending it again. Creates
    are left out: every Event of a namespace is POSTed to one URI, so another Event is no resend."""
    throttled: list[tuple[str, float]] = []
    received: dict[str, list[float]] = {}
    for event in audit.events(plane.audit_log_path):
        if event.get("stage") != "ResponseComplete" or (event.get("user") or {}).get("username") != user or event.get("verb") == "create":
            continue
        what = f"{event.get('verb')} {event.get('requestURI')}"
        at = _seconds(event["requestReceivedTimestamp"])
        received.setdefault(what, []).append(at)
        if (event.get("responseStatus") or {}).get("code") == 429:
            throttled.append((what, at))
    gaps = []
    for what, at in throttled:
        later = [t for t in received[what] if t > at]
        if later:
            gaps.append(min(later) - at)
    return len(throttled), gaps


def test_throttled_by_priority_and_fairness(isolated_plane, isolated_namespace, isolated_kube, operators, tmp_path, figures):
    plane, ns, kube = isolated_plane, isolated_namespace, isolated_kube
    kubeconfig, user = operator_identity(plane, ns, tmp_path)
    level = f"lorarl-chaos-{ns}"[:63]
    throttle(plane, ns, level)
    rejected_before = rejected_by_apf(plane, level)
    op = operators(plane, ns, kubeconfig=kubeconfig, resync_seconds=600)  # its start-up listing is throttled too
    op.wait_for_log("listed", count=2, timeout=120)
    names = [f"apf-{i:02d}" for i in range(THROTTLED_BURST)]
    began = time.monotonic()
    apply_jobs(plane, ns, names)  # one burst: 32 workers want to write at once, the flow has 3 seats
    seconds = converge(kube, ns, {n: "Pending" for n in names}, since=began, timeout=300)
    # changes after the burst still arrive through the (throttled) watches
    drive(kube, ns, "apf-00", "running")
    delete_jobs(plane, ns, ["apf-01"])
    changed = time.monotonic()
    expected = {**{n: "Pending" for n in names if n != "apf-01"}, "apf-00": "Running"}
    after_change = converge(kube, ns, expected, since=changed, timeout=120)
    wait_for(gone(kube, ns, ["apf-01"]), what="the deleted job's children gone")
    rejected = rejected_by_apf(plane, level) - rejected_before
    throttled, gaps = resend_gaps(plane, user)
    total = sum(1 for _ in audit.requests(plane.audit_log_path, user))
    log = op.output()
    figures(
        "apf-throttled",
        f"{THROTTLED_BURST} creates at once, the operator's flow on a 3-seat priority level (Reject)",
        converge_after_burst=seconds,
        converge_after_change=after_change,
        rejected_429=rejected,
        audited_429=throttled,
        operator_requests=total,
        resent_after_seconds_min=min(gaps, default=0.0),
        resent_after_seconds_median=sorted(gaps)[len(gaps) // 2] if gaps else 0.0,
    )
    assert rejected > 0 and throttled > 0, "the API server never throttled the operator: nothing was tested"
    # the API server's Retry-After is at least 1 s (k8s.io/apiserver@v0.37.2 pkg/util/flowcontrol/
    # dropped_requests_tracker.go:73): a request sent again sooner did not wait as asked
    assert gaps and min(gaps) >= 0.9, f"a throttled request was sent again after {min(gaps):.2f}s"
    assert "Traceback" not in log
    assert op.alive and op.starts == 1


def test_half_open_connection_mid_watch_and_mid_request(isolated_plane, isolated_namespace, isolated_kube, operators, tmp_path, figures):
    plane, ns, kube = isolated_plane, isolated_namespace, isolated_kube
    kubeconfig, user = operator_identity(plane, ns, tmp_path)
    with ChaosProxy.for_server(plane.server) as proxy:
        op = operators(plane, ns, kubeconfig=proxy.kubeconfig(kubeconfig, tmp_path / "via-proxy.kubeconfig"), resync_seconds=600)
        names = [f"open-{i:02d}" for i in range(4)]
        apply_jobs(plane, ns, names)
        converge(kube, ns, {n: "Pending" for n in names}, since=time.monotonic())
        watches_before = len(audit.open_watches(plane.audit_log_path, user))

        # a burst is being worked on when every connection goes silent: requests in flight,
        # watches open; nothing is closed, so the operator hears of nothing
        burst = [f"burst-{i:02d}" for i in range(12)]
        apply_jobs(plane, ns, burst)
        wait_for(lambda: any(f"/{n}]" in line for line in op.reconciles(ns) for n in burst), interval=0.02, what="a reconcile of the burst")
        proxy.hang()
        hung_at = time.monotonic()
        # the world changes meanwhile (the test's own client goes straight to the API server)
        late = [f"late-{i:02d}" for i in range(4)]
        apply_jobs(plane, ns, late)
        drive(kube, ns, "open-00", "running")
        delete_jobs(plane, ns, ["open-01"])
        time.sleep(HANG_SECONDS)  # the fault's duration (nothing is asserted about this window)
        proxy.answer()
        answered = time.monotonic()
        expected = {**{n: "Pending" for n in names + burst + late if n != "open-01"}, "open-00": "Running"}
        seconds = converge(kube, ns, expected, since=answered, timeout=240)
        wait_for(gone(kube, ns, ["open-01"]), what="the deleted job's children gone")
        swallowed = dict(proxy.swallowed)
    log = op.output()
    reopened = sum("watching" in line and "failed" in line and "Timeout" in line for line in log.splitlines())
    figures(
        "half-open",
        f"every connection silent for {HANG_SECONDS}s mid-burst (no FIN/RST), then new ones answered",
        converge_after_answer=seconds,
        converge_after_hang_began=seconds + (answered - hung_at),
        watches_open_before=watches_before,
        bytes_swallowed_up=swallowed["up"],
        bytes_swallowed_down=swallowed["down"],
        watch_reopens_after_idle=reopened,
    )
    assert swallowed["up"] > 0, "no request went into the silence: nothing was tested"
    assert watches_before >= 2, "the operator had no watch open when the connection went silent"
    assert reopened >= 2, "the operator's silent watches were never noticed and reopened"
    assert op.alive and op.starts == 1
