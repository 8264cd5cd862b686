"""Chaos: kube-apiserver crashes, etcd stops, watches expire (410 Gone), the API server is slow.

These run on a control plane of their own (``isolated_plane``). The operator authenticates as a
ServiceAccount of its own, so the API server's audit log tells its requests apart from the test's
(the "no busy loop" figure: its requests per second while the fault lasts). Its resync is 10 min:
what it does after a fault it must have learnt from its watches (or a re-list after 410), never
from the periodic backstop.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s
from lorarl_dev.chaosproxy import ChaosProxy

from tests.chaos.world import apply_jobs, converge, delete_jobs, drive, gone, operator_identity, requests_of
from tests.helpers import wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.controlplane]

ETCD_DOWN_SECONDS = 30
#: a client in a busy loop against a failing API server sends hundreds of requests a second;
#: kopf's backoffs and our TemporaryError delays keep it to a few
MAX_REQUESTS_PER_SECOND = 10


def watch_expired(plane, namespace: str, resource_version: str) -> bool:
    """The API server's own answer: a watch of LoraRLJobs from ``resource_version`` gets 410 Gone."""
    out = plane.kubectl(
        "get", "--raw", f"/apis/lorarl.dev/v1alpha1/namespaces/{namespace}/lorarljobs?watch=1&resourceVersion={resource_version}&timeoutSeconds=1"
    ).stdout
    return '"code":410' in out


def test_apiserver_crash_and_etcd_outage(isolated_plane, isolated_namespace, isolated_kube, operators, tmp_path, figures):
    plane, ns, kube = isolated_plane, isolated_namespace, isolated_kube
    kubeconfig, user = operator_identity(plane, ns, tmp_path)
    op = operators(plane, ns, kubeconfig=kubeconfig, resync_seconds=600)
    names = [f"api-{i:02d}" for i in range(20)]
    apply_jobs(plane, ns, names)
    wait_for(lambda: op.reconciles(ns), interval=0.05, what="the first reconcile")  # mid-run: the burst is being worked on
    down = time.monotonic()
    done_before = len({line.split("]")[0] for line in op.reconciles(ns)})
    plane.restart_apiserver()  # SIGKILL, then the same flags, port and etcd data
    up = time.monotonic()
    seconds = converge(kube, ns, {n: "Pending" for n in names}, since=up)
    figures(
        "apiserver-crash",
        "kube-apiserver SIGKILLed mid-burst of 20 creates, restarted",
        jobs_reconciled_before_crash=done_before,
        apiserver_down=up - down,
        converge_after_ready=seconds,
    )

    drive(kube, ns, "api-00", "running")
    converge(kube, ns, {**{n: "Pending" for n in names}, "api-00": "Running"}, since=time.monotonic())
    # etcd dies mid-burst too: the operator's requests fail (500s, timeouts) for the whole outage
    burst = [f"etcd-{i:02d}" for i in range(10)]
    apply_jobs(plane, ns, burst)
    wait_for(lambda: any(f"/{n}]" in line for line in op.reconciles(ns) for n in burst), interval=0.05, what="a reconcile of the burst")
    before, began = requests_of(plane, user), time.monotonic()
    plane.stop_etcd()
    time.sleep(ETCD_DOWN_SECONDS)  # the fault's duration (nothing is asserted about this window but a count below)
    restarting = time.monotonic()
    plane.start_etcd()  # returns once kube-apiserver is ready again
    back = time.monotonic()
    rate = (requests_of(plane, user) - before) / (back - began)
    # changes right after the outage: the operator must see them through its (re-established) watches
    drive(kube, ns, "api-01", "succeeded")
    drive(kube, ns, "api-02", "failed")
    delete_jobs(plane, ns, ["api-03"])
    apply_jobs(plane, ns, ["api-new"])
    expected = {**{n: "Pending" for n in names + burst if n != "api-03"}, "api-00": "Running", "api-01": "Succeeded", "api-02": "Failed", "api-new": "Pending"}
    seconds = converge(kube, ns, expected, since=back)
    wait_for(gone(kube, ns, ["api-03"]), what="the deleted job's children gone")
    assert op.alive and op.starts == 1, "the operator recovered without a restart of its own"
    assert rate < MAX_REQUESTS_PER_SECOND, f"{rate:.1f} requests/s while etcd was down"
    figures(
        "etcd-outage",
        f"etcd killed for {ETCD_DOWN_SECONDS}s mid-burst of 10 creates",
        etcd_down=restarting - began,
        apiserver_ready_after_etcd_start=back - restarting,
        operator_requests_per_second=rate,
        converge_after_ready=seconds,
    )


def test_watch_expiry_and_slow_apiserver(isolated_plane, isolated_namespace, isolated_kube, operators, tmp_path, figures):
    plane, ns, kube = isolated_plane, isolated_namespace, isolated_kube
    kubeconfig, user = operator_identity(plane, ns, tmp_path)
    with ChaosProxy.for_server(plane.server) as proxy:
        op = operators(plane, ns, kubeconfig=proxy.kubeconfig(kubeconfig, tmp_path / "via-proxy.kubeconfig"), resync_seconds=600, extra_args=["--verbose"])
        names = [f"watch-{i}" for i in range(4)]
        apply_jobs(plane, ns, names)
        converge(kube, ns, {n: "Pending" for n in names}, since=time.monotonic())

        # 410 Gone: the operator's watches are cut and it cannot reconnect while the world changes;
        # a crash of the API server then drops the history its resourceVersion points into
        proxy.blocked = True
        proxy.cut()
        connections, cut_at = proxy.connections, time.monotonic()
        seen = k8s.CustomObjectsApi(kube.client).list_namespaced_custom_object("lorarl.dev", "v1alpha1", ns, "lorarljobs")["metadata"]["resourceVersion"]
        drive(kube, ns, "watch-0", "running")
        delete_jobs(plane, ns, ["watch-1"])
        apply_jobs(plane, ns, ["watch-4"])
        plane.restart_apiserver()
        assert watch_expired(plane, ns, seen), "the API server still serves the operator's resourceVersion: no 410 to test"
        proxy.blocked = False
        reopened = time.monotonic()
        attempts = (proxy.connections - connections) / (reopened - cut_at)
        expected = {"watch-0": "Running", "watch-2": "Pending", "watch-3": "Pending", "watch-4": "Pending"}
        seconds = converge(kube, ns, expected, since=reopened)
        wait_for(gone(kube, ns, ["watch-1"]), what="the deleted job's children gone")
        relisted = sum("is too old; listing again" in line for line in op.output().splitlines())  # lorarl.informer
        figures(
            "watch-expiry",
            "watches cut, API server unreachable + restarted (410 Gone on resume)",
            unreachable=reopened - cut_at,
            reconnects_per_second=attempts,
            converge_after_reachable=seconds,
            watch_restarts_after_410=relisted,
        )
        assert attempts < MAX_REQUESTS_PER_SECOND

        # a slow API server: every chunk either way waits 0.5 s (each request >= 1 s, events late)
        proxy.latency = 0.5
        before, began = requests_of(plane, user), time.monotonic()
        drive(kube, ns, "watch-2", "running")
        drive(kube, ns, "watch-3", "failed")
        apply_jobs(plane, ns, ["watch-5"])
        changed = time.monotonic()
        expected = {**expected, "watch-2": "Running", "watch-3": "Failed", "watch-5": "Pending"}
        seconds = converge(kube, ns, expected, since=changed)
        rate = (requests_of(plane, user) - before) / (time.monotonic() - began)
        figures("slow-apiserver", "0.5 s added to every chunk both ways (proxy)", converge_after_change=seconds, operator_requests_per_second=rate)
        assert rate < MAX_REQUESTS_PER_SECOND
        proxy.latency = 0
        assert op.alive and op.starts == 1
