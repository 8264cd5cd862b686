"""The pod mapping on pods as the real kubelet wrote them (recorded on the real node by
tests/e2e/test_failures.py's jobs: KubeRay's head pods, trimmed as the operator's cache trims)."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest
from lorarl.control import pods

RECORDED = pathlib.Path(__file__).resolve().parent / "recorded_pods"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text())


@pytest.mark.parametrize(
    "name,reason,words",
    [
        ("prepare-image-never-pull", pods.IMAGE_PULL, ("init container prepare", "not-there:never", "ErrImageNeverPull")),
        (
            "prepare-download-crash-loop",
            pods.INPUT_DOWNLOAD_FAILED,
            ("init container prepare exited 4", "could not download model Qwen/Qwen3-4B@not-on-the-hub"),
        ),
        ("ray-head-secret-missing", pods.CONFIG_ERROR, ("container ray-head", 'secret "wandb-missing" not found')),
    ],
)
def test_a_recorded_pod_is_named_with_its_container_and_cause(name, reason, words):
    trouble = pods.diagnose([pods.trim_pod(recorded(name))])
    assert trouble is not None and trouble.reason == reason and trouble.stuck
    for word in words:
        assert word in trouble.message


def test_a_ray_head_running_again_after_one_exit_is_not_stuck():
    """Seen on the node: three Ray heads starting together at load ~40 each missed the raylet's
    30 s and exited 1 once, then ran. Running again after one exit is no crash loop; after
    CRASH_LOOP_RESTARTS exits, or while it waits in back-off or has just exited, it is."""
    body = recorded("ray-head-restarted-once-running")
    (head,) = body["status"]["containerStatuses"]
    assert head["restartCount"] == 1 and "running" in head["state"] and head["lastState"]["terminated"]["exitCode"] == 1
    assert pods.diagnose([pods.trim_pod(body)]) is None
    many = copy.deepcopy(body)
    many["status"]["containerStatuses"][0]["restartCount"] = pods.CRASH_LOOP_RESTARTS
    assert pods.diagnose([pods.trim_pod(many)]).reason == pods.CRASH_LOOP
    exited = copy.deepcopy(body)
    exited["status"]["containerStatuses"][0]["state"] = {"terminated": head["lastState"]["terminated"]}
    assert pods.diagnose([pods.trim_pod(exited)]).reason == pods.CRASH_LOOP
