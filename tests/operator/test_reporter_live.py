"""The in-job reporter (the zipapp the renderer ships, run with no site-packages) against the
real API server, with the per-job ServiceAccount the renderer creates: it may update its own
job's status and nothing else; a retried run is counted across its attempts."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.helpers import job, kubectl_rows, make_job, reporter_env, run_reporter_on_200_rollouts, shipped_reporter
from tests.reporter.reporter_testlib import expected_final_status, trainer_command, without_time

pytestmark = pytest.mark.controlplane


def test_reporter_fills_status_with_per_job_identity(control_plane, namespace, kube, tmp_path):
    mine = make_job(control_plane, namespace, kube, "job-a")
    result, log = run_reporter_on_200_rollouts(control_plane, kube, namespace, mine, tmp_path)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout == log.data  # the trainer's output, unchanged
    assert b"[lorarl-reporter]" not in result.stderr, result.stderr.decode()[-2000:]
    stored = job(kube, namespace, mine)["status"]
    owned = {k: stored[k] for k in ("progress", "metrics", "eval", "checkpoints", "history")}
    assert without_time(owned) == expected_final_status(log)
    assert stored["progress"]["lastUpdateTime"].endswith("Z")
    # the printer columns read it
    (row,) = kubectl_rows(control_plane.kubectl("get", "lorarljob", mine, "-n", namespace, "-o", "wide").stdout)
    assert (row["ROLLOUT"], row["TOTAL"]) == ("200", "200")


def test_a_resumed_run_counts_100_rollouts_over_two_attempts(control_plane, namespace, kube, tmp_path):
    """Attempt 1 dies half-way through the save of rollout 79; the entrypoint runs again (as a
    KubeRay retry would) and resumes from 59 with 40 rollouts left. The API server stores what
    both attempts reported: 100 of 100, 2 attempts, 120 rollouts trained."""
    mine = make_job(control_plane, namespace, kube, "job-r")
    token = tmp_path / "token"
    token.write_text(control_plane.service_account_token(namespace, f"{mine}-reporter"))
    save = tmp_path / "checkpoints"
    env = {**reporter_env(control_plane, token), "PYTHONPATH": os.pathsep.join(sys.path)}
    reporter = shipped_reporter(tmp_path)

    def attempt(**extra):
        return subprocess.run(
            [
                *reporter,
                "--namespace",
                namespace,
                "--name",
                mine,
                "--total-rollouts",
                "100",
                "--save-dir",
                str(save),
                "--gpus",
                "8",
                "--interval",
                "0.2",
                "--resume",
                "--",
                *trainer_command(str(save)),
            ],
            capture_output=True,
            env={**env, **extra},
            timeout=300,
        )

    first = attempt(FAKE_CRASH_AFTER="79", FAKE_TORN="1", FAKE_WANDB_URL="https://wandb.ai/team/proj/runs/job-r")
    assert first.returncode == 1, first.stderr.decode()[-2000:]
    status = job(kube, namespace, mine)["status"]
    assert (status["progress"]["rollout"], status["progress"]["attempts"]) == (80, 1)
    assert (status["checkpoints"]["latestIteration"], status["checkpoints"]["saving"]) == (59, 79)

    second = attempt()
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    status = job(kube, namespace, mine)["status"]
    progress = status["progress"]
    assert (progress["rollout"], progress["total"], progress["percent"], progress["attempts"], progress["trainedRollouts"]) == (100, 100, 100, 2, 120)
    assert "gpuHours" not in progress  # the operator's, from the pods (no pods here)
    assert status["checkpoints"] == {"latestIteration": 99, "latestPath": f"{save}/attempt-002/iter_0000039/adapter", "count": 5}
    assert status["tracking"] == {"wandbRunURL": "https://wandb.ai/team/proj/runs/job-r"}  # kept from attempt 1
    (row,) = kubectl_rows(control_plane.kubectl("get", "lorarljob", mine, "-n", namespace, "-o", "wide").stdout)
    assert (row["ROLLOUT"], row["TOTAL"]) == ("100", "100")


def test_reporter_identity_cannot_touch_another_job(control_plane, namespace, kube, tmp_path):
    mine = make_job(control_plane, namespace, kube, "job-a")
    other = make_job(control_plane, namespace, kube, "job-b")
    token = control_plane.service_account_token(namespace, f"{mine}-reporter")
    ctx = ssl.create_default_context(cafile=str(control_plane.ca_file))

    def patch(name):
        req = urllib.request.Request(
            f"{control_plane.server}/apis/lorarl.dev/v1alpha1/namespaces/{namespace}/lorarljobs/{name}/status",
            data=json.dumps({"status": {"progress": {"rollout": 1, "total": 100, "percent": 1}}}).encode(),
            method="PATCH",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"},
        )
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code

    assert patch(mine) == 200
    assert patch(other) == 403
    # nor the spec of its own job, nor any other resource
    req = urllib.request.Request(
        f"{control_plane.server}/apis/lorarl.dev/v1alpha1/namespaces/{namespace}/lorarljobs/{mine}",
        data=b'{"spec":{"suspend":true}}',
        method="PATCH",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, context=ctx, timeout=10)
    assert err.value.code == 403
    assert "progress" not in (job(kube, namespace, other).get("status") or {})
