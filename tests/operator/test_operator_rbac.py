"""The operator with only the chart's RBAC (charts/lorarl-operator/templates/rbac.yaml, rendered
by the real helm for a namespaced watch): least privilege is enough, and the liveness and
metrics endpoints answer."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

import pytest
import yaml
from lorarl_dev.processes import free_port

from tests.chart.helm import operator_rbac
from tests.helpers import apply_job, conditions, events, job, metrics_reader_token, phase_is, rayjob, seed_doc, wait_for

pytestmark = pytest.mark.controlplane


def test_operator_runs_with_least_privilege(control_plane, namespace, kube, tmp_path, helm):
    # release name = namespace: the ClusterRole/Binding names are unique to this test
    docs = operator_rbac(helm, namespace, release=namespace, watch_namespaces=[namespace])
    assert not any("secrets" in rule["resources"] for d in docs for rule in d.get("rules", []))
    sa_name = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    cluster_scoped = [d for d in docs if d["kind"].startswith("Cluster")]
    kubeconfig = control_plane.restricted_kubeconfig(namespace, sa_name)
    assert control_plane.kubectl("auth", "can-i", "create", "secrets", "-n", namespace, kubeconfig=kubeconfig, check=False).stdout.strip() == "no"

    health, metrics = free_port(), free_port()
    log = open(tmp_path / "operator.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lorarl.cli",
            "run",
            "-n",
            namespace,
            "--liveness",
            f"http://127.0.0.1:{health}/healthz",
            "--metrics-port",
            str(metrics),
            "--resync-seconds",
            "1",
            "--log-format",
            "json",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )
    try:
        doc = seed_doc()
        doc["spec"]["tracking"] = {"wandb": {"apiKeySecretRef": {"name": "wandb", "key": "api-key"}}}
        apply_job(control_plane, namespace, doc)
        st = wait_for(phase_is(kube, namespace, "Pending"), timeout=60, what="reconciled by the restricted operator")
        assert conditions(st)["Reconciling"][0] == "True"
        assert rayjob(kube, namespace) is not None
        wait_for(lambda: ("Normal", "Pending") in events(kube, namespace), what="event")
        assert urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=5).status == 200
        # authenticated metrics (the default): the chart's RBAC lets the operator review a token
        token = metrics_reader_token(control_plane, namespace)

        def scrape() -> str:
            request = urllib.request.Request(f"http://127.0.0.1:{metrics}/metrics", headers={"Authorization": f"Bearer {token}"})
            return urllib.request.urlopen(request, timeout=5).read().decode()

        text = scrape()
        assert 'lorarl_reconcile_total{result="ok",trigger="change"}' in text
        assert "lorarl_reconcile_duration_seconds_bucket" in text
        assert 'lorarl_cached_objects{form="whole",kind="LoraRLJob"} 1.0' in text  # the running job, kept whole
        assert 'lorarl_cached_objects{form="whole",kind="RayJob"} 1.0' in text
        wait_for(
            lambda: 'lorarl_jobs{phase="Pending"} 1.0' in scrape(),
            what="jobs gauge",
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(cluster_scoped))
    output = (tmp_path / "operator.log").read_text()
    assert "Forbidden" not in output and "forbidden" not in output, output[-3000:]
    assert "Not enough permissions" not in output, output[-3000:]  # kopf's CRD/namespace observers
    assert '"message"' in output  # structured (JSON) logs
    assert job(kube, namespace)["metadata"].get("finalizers") in (None, [])
