"""`kubectl get lrl -w` (the real kubectl, against the real API server and the operator as a
process) prints one line per real change: a reporter update is not followed by a second write
of the operator's that changes nothing a user sees (it used to be: the TrainingHealthy message
quoted the metric that had just changed)."""

from __future__ import annotations

import itertools
import re
import subprocess
import threading

from tests.helpers import NAME, apply_job, phase_is, running, seed_doc, wait_for

UPDATES = 5
AGE = re.compile(r"\s+\d+[smhd]\S*$")  # the last column, which changes by itself


def at_rollout(line: str, rollout: int) -> bool:
    """NAME PHASE REASON STALLED ROLLOUT ... (-o wide)."""
    return re.match(rf"\S+\s+Running\s+Training\s+False\s+{rollout}\s", line) is not None


def test_one_line_per_reporter_update_in_kubectl_get_w(control_plane, namespace, kube, operator):
    apply_job(control_plane, namespace, seed_doc())
    ray = running(kube, namespace)
    watch = subprocess.Popen(
        [control_plane.kubectl_path, f"--kubeconfig={control_plane.kubeconfig}", "get", "lrl", NAME, "-n", namespace, "-w", "--no-headers", "-o", "wide"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(watch.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(" Running " in line for line in lines), what="kubectl's first line")
        for rollout in range(1, UPDATES + 1):  # what the reporter sends, as its merge patches
            kube.patch_status(
                "lorarl.dev/v1alpha1",
                "LoraRLJob",
                namespace,
                NAME,
                {
                    "progress": {"rollout": rollout, "total": 100, "percent": rollout},
                    "metrics": {"trainRolloutLogprobAbsDiffMean": 0.01 + rollout / 1000, "step": rollout},
                },
            )
            wait_for(lambda r=rollout: any(at_rollout(line, r) for line in lines), what=f"the line of rollout {rollout}")
        ray.succeeded()  # the operator's own last write: everything before it has been handled
        wait_for(phase_is(kube, namespace, "Succeeded"), what="Succeeded")
        wait_for(lambda: any(" Succeeded " in line for line in lines), what="kubectl's Succeeded line")
    finally:
        watch.terminate()
        watch.wait(timeout=30)
    shown = [AGE.sub("", line.rstrip()) for line in lines if line.strip()]
    repeated = [a for a, b in itertools.pairwise(shown) if a == b]  # the same columns twice: a write nobody can see
    assert not repeated, "\n".join(lines)
    for rollout in range(1, UPDATES + 1):
        assert sum(at_rollout(line, rollout) for line in shown) <= 2, "\n".join(lines)  # the update, and at most a health flip
