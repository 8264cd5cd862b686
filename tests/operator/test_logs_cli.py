"""`lorarl logs` against the real API server (no kubelet here: the node suite follows a real
submitter's log, tests/e2e/test_failures.py). Its look-up of the submitter pod goes through the
operator's client, whose resource table once lacked Pod: every `lorarl logs` ended in a
KeyError traceback before it said anything."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import NAME, apply_job, seed_doc

pytestmark = pytest.mark.controlplane


def lorarl_logs(control_plane, namespace: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    return subprocess.run([sys.executable, "-m", "lorarl.cli", "logs", *args, "-n", namespace], env=env, capture_output=True, text=True, timeout=60)


def test_logs_of_a_job_whose_submitter_has_not_started_says_so(control_plane, namespace):
    apply_job(control_plane, namespace, seed_doc())
    # a pod of another Job in the namespace is not this job's submitter
    control_plane.kubectl(
        "run", "other", "-n", namespace, "--image=registry.invalid/none:1", "--restart=Never", "--labels=batch.kubernetes.io/job-name=someone-else"
    )
    done = lorarl_logs(control_plane, namespace, NAME)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    assert f"no trainer output yet (the submitter pod of RayJob {NAME} has not started; Pending" in done.stderr, done.stderr


def test_logs_of_a_job_that_does_not_exist_names_it(control_plane, namespace):
    done = lorarl_logs(control_plane, namespace, "absent")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done
    assert f"LoraRLJob {namespace}/absent not found" in done.stderr, done.stderr
