"""Stopping the real node leaves nothing on the machine: no mount, network namespace, iptables
rule in the root namespace, cgroup, fixed directory, changed sysctl, or process of ours. The
oracle is the machine itself (findmnt, ip netns, iptables-save, the cgroup dirs, /proc), read
before the node started and after it stopped, and again after a killed run (`lorarl-dev
controlplane up --node`, every process SIGKILLed, a pod left running) is swept; then the session's
node is started again (warm) for the tests that follow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from lorarl_dev.node import images, netns, realnode
from lorarl_dev.processes import pid_alive
from lorarl_dev.pytest_plugin import REAL_NODE_BASELINE

pytestmark = pytest.mark.node


def test_stop_and_a_killed_runs_sweep_remove_everything_the_node_made(real_node_cluster, request, tmp_path):
    cp = real_node_cluster
    before = request.config.stash[REAL_NODE_BASELINE]
    # something that leaves traces: a running pod on the bridge with a volume
    cp.kubectl("create", "namespace", "teardown-check")
    cp.kubectl(
        "run", "-n", "teardown-check", "sleeper", f"--image={images.BUSYBOX_IMAGE}", "--image-pull-policy=Never", "--restart=Never", "--", "sleep", "3600"
    )
    cp.kubectl("wait", "-n", "teardown-check", "pod/sleeper", "--for=condition=Ready", "--timeout=120s", timeout=150)
    pids = dict(cp.pids)
    netns_inode = os.stat(f"/run/netns/{cp.netns}").st_ino
    during = realnode.machine_snapshot()
    assert during != before  # the snapshot sees what a node adds (so it can fail)

    try:
        cp.stop()
        after = realnode.machine_snapshot()
        assert after == before
        assert [name for name, pid in pids.items() if pid_alive(pid)] == []
        in_our_netns = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if os.stat(f"/proc/{d}/ns/net").st_ino == netns_inode:
                        in_our_netns.append(d)
                except OSError:
                    pass
        assert in_our_netns == []

        # a killed run (every process we started SIGKILLed, its pods left running) is swept by the
        # next start; `lorarl-dev controlplane up --node` is that run, detached
        state = tmp_path / "state"
        up = subprocess.run(
            [sys.executable, "-m", "lorarl_dev.cli", "controlplane", "up", "--node", "--gpus", "2", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert up.returncode == 0, up.stderr[-3000:]
        kubeconfig = up.stdout.strip().removeprefix("export KUBECONFIG=")
        kubectl = [cp.kubectl_path, f"--kubeconfig={kubeconfig}"]
        subprocess.run(
            [*kubectl, "run", "orphan", f"--image={images.BUSYBOX_IMAGE}", "--image-pull-policy=Never", "--restart=Never", "--", "sleep", "3600"],
            check=True,
            capture_output=True,
        )
        subprocess.run([*kubectl, "wait", "pod/orphan", "--for=condition=Ready", "--timeout=120s"], check=True, capture_output=True, timeout=150)
        record = json.loads(realnode.RECORD.read_text())
        for pid in record["pids"].values():
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(pid_alive(p) for p in record["pids"].values()) and time.monotonic() < deadline:
            time.sleep(0.1)  # not our children: init reaps them
        assert realnode.machine_snapshot() != before  # the killed run left its node behind
        assert realnode.sweep()
        assert realnode.machine_snapshot() == before
    finally:
        # the session's node again (warm: binaries and images cached), whatever failed above: the
        # tests after this one need it
        if not cp.running:
            realnode.sweep()  # what a failed step above may have left
            t0 = time.monotonic()
            cp.start()
            print(f"real node warm start: {time.monotonic() - t0:.1f}s")
    nodes = json.loads(cp.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [n["metadata"]["name"] for n in nodes] == [realnode.NODE_NAME]
    listed = [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines() if line]
    # one node's namespace (the harness's own, such as Argo CD's in a parallel stream, are not a node's)
    assert [name for name in listed if name.startswith("lorarl-") and netns.owner_pid(name) is None] == [cp.netns]
