"""Honest GPU-hours on the real API server: the operator counts its job's pods from their
scheduling to the release of their GPUs, every attempt included, across an operator restart,
into status.progress.gpuHours, the -o wide column and the per-namespace chargeback counter.

The pods are created through the API (bound to a Node object with ``nodeName``; no scheduler or
kubelet runs them) and their status is patched as the kubelet reports it; the times are set in
the past so that the expected hours are exact. The oracle: those timestamps, and the API
server's stored status and kubectl's own column.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from kubernetes import client as k8s
from lorarl_dev.operatorproc import OperatorProcess
from lorarl_dev.processes import free_port

from tests.helpers import NAME, api_node, apply_job, end_gpu_pod, gpu_pod, job, kubectl_rows, phase_is, running, seed_doc, wait_for

pytestmark = pytest.mark.controlplane


def accounting(kube, namespace):
    st = job(kube, namespace)["status"]
    return st.get("progress", {}).get("gpuHours"), st.get("gpuAccounting") or {}


def scraped(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("lorarl_") and "gpu_hours" in line}


def test_gpu_hours_count_every_attempts_pods_from_scheduling_to_release(control_plane, namespace, kube, tmp_path):
    node = api_node(kube, f"gpu-{namespace}")
    port = free_port()
    operator = OperatorProcess(
        control_plane, namespace, tmp_path, extra_args=("--metrics-port", str(port), "--metrics-address", "127.0.0.1", "--metrics-auth", "none")
    ).start()  # the content, not the auth (test_metrics_auth.py)
    try:
        operator.wait_for_log(f"lorarljobs.lorarl.dev in {namespace} (unfinished) in")  # listed: a job created now is new to it
        apply_job(control_plane, namespace, seed_doc())
        ray = running(kube, namespace)
        t = float(int(time.time()))
        # attempt 1: held 8 GPUs from t-3600 (the download included) and died at t-1800; its
        # status comes in one report (seen running now, it could not have ended half an hour ago)
        gpu_pod(kube, namespace, NAME, f"{NAME}-a1-head", node, scheduled=t - 3600, finished=t - 1800)
        wait_for(lambda: accounting(kube, namespace)[0] == 4.0, timeout=60, what="4.0 GPU-hours of attempt 1")
        # attempt 2: its head holds 8 GPUs since t-600
        gpu_pod(kube, namespace, NAME, f"{NAME}-a2-head", node, scheduled=t - 600)
        wait_for(lambda: (accounting(kube, namespace)[0] or 0) >= 4.0 + 8 * 600 / 3600, timeout=60, what="attempt 2 counted")
        # attempt 1's RayCluster goes: its pod is deleted at once; its hours stay
        k8s.CoreV1Api(kube.client).delete_namespaced_pod(f"{NAME}-a1-head", namespace, grace_period_seconds=0)
        wait_for(lambda: [p["name"] for p in accounting(kube, namespace)[1].get("pods", [])] == [f"{NAME}-a2-head"], timeout=60, what="attempt 1 settled")
        hours, acct = accounting(kube, namespace)
        assert acct["settledHours"] == 4.0 and acct["pods"][0]["holding"] is True and hours >= 4.0 + 8 * 600 / 3600

        # the column and the metrics say the same as the status
        def column():
            return float(kubectl_rows(control_plane.kubectl("get", "lorarljobs", "-n", namespace, "-o", "wide").stdout)[0]["GPU-HOURS"])

        wait_for(lambda: column() == accounting(kube, namespace)[0], timeout=30, what="the GPU-HOURS column")  # a write a minute may fall between
        metrics = scraped(port)
        gauge = metrics[f'lorarl_job_gpu_hours{{lorarljob="{NAME}",namespace="{namespace}"}}']
        counter = metrics[f'lorarl_namespace_gpu_hours_total{{namespace="{namespace}"}}']
        assert gauge >= hours and counter == gauge  # created after the operator started: counted from 0

        # a restart forgets nothing and counts nothing twice: attempt 1 stays in settledHours,
        # attempt 2 is recomputed from its own timestamps
        operator.stop()
        restarted = operator.reconciles(namespace, NAME)
        operator.start()
        wait_for(lambda: len(operator.reconciles(namespace, NAME)) > len(restarted), timeout=60, what="a reconcile after the restart")
        ray.succeeded()
        wait_for(phase_is(kube, namespace, "Succeeded"), timeout=60, what="Succeeded")
        # finished, but its head still holds the GPUs until KubeRay's clean-up ends it
        end = float(int(time.time()))
        end_gpu_pod(kube, namespace, f"{NAME}-a2-head", started=t - 590, finished=end, phase="Succeeded")
        expected = round(4.0 + 8 * (end - (t - 600)) / 3600, 4)
        # first the operator's record of the release (a write while the pod still held its GPUs can
        # land on the same total when it fell within a few hundredths of a second of `end`)
        wait_for(lambda: [p["holding"] for p in accounting(kube, namespace)[1].get("pods", [])] == [False], timeout=60, what="the release recorded")
        hours, acct = accounting(kube, namespace)
        assert hours == expected and acct["settledHours"] == 4.0
    finally:
        operator.stop()
        control_plane.kubectl("delete", "node", node, "--ignore-not-found", check=False)
    operator.assert_no_tracebacks()
