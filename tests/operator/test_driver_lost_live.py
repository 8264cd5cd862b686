"""DriverLost on the real API server, the operator running as a process: KubeRay's RayJob says
Running/RUNNING (its status as KubeRay v1.5.0 writes it: lorarl_dev.kuberay_sim) while the head
pod the driver ran in reports its Ray container restarted after the Ray job started.

The pod is created through the API (bound to a Node object, no kubelet) and its status patched as
the kubelet reports a restart in place; the oracle is the status and the Events the API server
stores. The head running untouched first: the operator looked (a reconcile on the pod's event)
and said nothing.
"""

from __future__ import annotations

import time

import pytest
from lorarl_dev.operatorproc import OperatorProcess

from tests.helpers import (
    NAME,
    api_node,
    apply_job,
    conditions,
    count_reconciles,
    events,
    job,
    phase_is,
    ray_head_pod,
    restart_ray_head,
    rfc3339,
    seed_doc,
    started,
    wait_for,
)

pytestmark = pytest.mark.controlplane


def test_a_head_restarted_after_the_ray_job_started_is_a_lost_driver(control_plane, namespace, kube, tmp_path):
    node = api_node(kube, f"node-{namespace}")
    operator = OperatorProcess(control_plane, namespace, tmp_path).start()
    try:
        operator.wait_for_log(f"lorarljobs.lorarl.dev in {namespace} (unfinished) in")
        apply_job(control_plane, namespace, seed_doc())
        t = float(int(time.time()))
        ray = started(kube, namespace)
        ray.initializing()
        ray.submitted()
        ray.running(started=rfc3339(t - 600))  # the Ray job started ten minutes ago
        wait_for(phase_is(kube, namespace, "Running"), what="Running")
        seen = count_reconciles(operator, namespace, "(pod-event): phase Running")
        head = ray_head_pod(kube, namespace, NAME, ray.cluster, node, started=t - 900)
        wait_for(lambda: count_reconciles(operator, namespace, "(pod-event): phase Running") > seen, timeout=60, what="a reconcile on the head's event")
        assert conditions(job(kube, namespace)["status"])["Ready"] == ("True", "Training")

        # the head's Ray container exited 5 minutes ago and was restarted in place: the driver,
        # which ran in it, is gone; KubeRay's RayJob still says RUNNING
        restart_ray_head(kube, namespace, head, started=t - 299, restarts=1, ended=t - 300)

        def stalled():
            return next(c for c in job(kube, namespace)["status"]["conditions"] if c["type"] == "Stalled")

        wait_for(lambda: stalled()["reason"] == "DriverLost", timeout=60, what="Stalled DriverLost")
        st = job(kube, namespace)["status"]
        assert stalled()["status"] == "True" and st["phase"] == "Running"
        assert f"the Ray container ray-head of head pod {head} ended at {rfc3339(t - 300)} (exit code 1, Error; 1 restart)" in stalled()["message"]
        assert conditions(st)["Ready"] == ("False", "DriverLost")
        assert st["rayJob"]["jobStatus"] == "RUNNING"  # KubeRay's word, unchanged
        wait_for(lambda: ("Warning", "DriverLost") in events(kube, namespace), timeout=30, what="the DriverLost Warning")
    finally:
        operator.stop()
        control_plane.kubectl("delete", "node", node, "--ignore-not-found", check=False)
    operator.assert_no_tracebacks()
