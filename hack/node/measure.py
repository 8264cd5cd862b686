"""Measure the real node: start time (the given run and a warm restart), pod start times, RSS.

    .venv/bin/python hack/node/measure.py [--pods 5]

Prints one JSON document. A pod's start time is from `kubectl apply` returning to the pod's
Ready condition as the kubelet reports it (status.conditions[Ready].lastTransitionTime is
second-granular, so the harness polls the API instead).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from lorarl_dev.controlplane import ControlPlane
from lorarl_dev.node import images


def _pod(name: str, host_network: bool) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "hostNetwork": host_network,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": images.BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
        },
    }


def _ready(cp: ControlPlane, name: str) -> bool:
    code, body = cp.get(f"/api/v1/namespaces/default/pods/{name}")
    conds = json.loads(body).get("status", {}).get("conditions", []) if code == 200 else []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def pod_start(cp: ControlPlane, name: str, host_network: bool) -> float:
    t0 = time.monotonic()
    cp.kubectl("apply", "-f", "-", input=json.dumps(_pod(name, host_network)))
    while not _ready(cp, name):
        if time.monotonic() - t0 > 120:
            raise TimeoutError(name)
        time.sleep(0.02)
    return time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=5, help="pods of each kind")
    args = parser.parse_args()
    result: dict = {}
    cp = ControlPlane(node=True, gpus=8)
    t0 = time.monotonic()
    cp.start()
    result["start_s"] = round(time.monotonic() - t0, 1)
    result["node_steps_s"] = {k: round(v, 1) for k, v in cp.node.timings.items()}
    try:
        for kind, host in (("bridge", False), ("hostnet", True)):
            times = [pod_start(cp, f"{kind}-{i}", host) for i in range(args.pods)]
            result[f"pod_ready_{kind}_s"] = {"median": round(statistics.median(times), 2), "all": [round(t, 2) for t in times]}
        result["rss_mib"] = {k: round(v / 2**20) for k, v in cp.node.rss_bytes().items()}
    finally:
        cp.stop()
    t0 = time.monotonic()
    cp.start()
    result["warm_restart_s"] = round(time.monotonic() - t0, 1)
    cp.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
