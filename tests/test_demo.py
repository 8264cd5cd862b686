"""The main job: `lorarl-dev demo` end to end in its own state dir, then `lorarl-dev demo down`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import kubectl_rows

pytestmark = pytest.mark.controlplane


def lorarl_dev(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "lorarl_dev.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_demo_runs_and_cleans_up(tmp_path):
    state = tmp_path / "demo"
    try:
        out = lorarl_dev("demo", "--state-dir", str(state), "--pace", "0", "--mode", "simulated")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "mode: SIMULATED" in out.stdout
        assert "rayjob.ray.io/qwen3-4b-lora-amd" in out.stdout
        assert "{'amd.com/gpu': '8'}" in out.stdout
        final = kubectl_rows(out.stdout, having="PHASE")[-1]
        assert (final["NAME"], final["PHASE"], final["ROLLOUT"], final["TOTAL"]) == ("qwen3-4b-lora-amd", "Succeeded", "100", "100")
        # the reporter ran with the rendered entrypoint's arguments (rollouts, checkpoints); the
        # GPU-hours come from pods, and the simulated demo has none
        progress = next(line for line in out.stdout.splitlines() if "progress: rollout" in line)
        assert "rollout 100/100" in progress and "latest checkpoint None" not in progress, progress
        kubeconfig = state / "controlplane" / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in out.stdout
        assert f"demo down --state-dir {state}  # stop everything" in out.stdout  # the hint stops this demo, not the default one
        # the user can kubectl against it
        kubectl = os.path.join(os.path.dirname(sys.executable), "kubectl")
        got = subprocess.run(
            [kubectl, f"--kubeconfig={kubeconfig}", "get", "lorarljobs,rayjobs", "-A", "-o", "json"], capture_output=True, text=True, timeout=60
        )
        kinds = sorted(item["kind"] for item in json.loads(got.stdout)["items"])
        assert kinds == ["LoraRLJob", "RayJob"]
        pids = json.loads((state / "controlplane" / "state.json").read_text())["pids"]
        operator_pid = int((state / "operator.pid").read_text())
    finally:
        down = lorarl_dev("demo", "down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert "operator stopped" in down.stdout and "control plane stopped" in down.stdout
    for pid in [operator_pid, *map(int, pids.values())]:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
