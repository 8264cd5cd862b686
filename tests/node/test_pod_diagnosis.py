"""Pod failures caused for real on the real node, read back as the kubelet and the scheduler
wrote them, and named by the operator's pure mapping (lorarl.control.pods.diagnose).

The oracle is the real kubelet/containerd/scheduler: each pod is broken the way a job's pod can
be (an image that is not there, more GPUs than the node has, a missing Secret, a memory limit
exceeded, prepare.sh failing a download, a container that keeps exiting, a claim that never
binds), all side by side in one namespace. With LORARL_RECORD_PODS=1 the pod objects are saved
to tests/operator/recorded_pods/ for the fast unit test (tests/operator/test_pods.py).
"""

from __future__ import annotations

import json
import os
import pathlib
import uuid

import pytest
from lorarl.control import pods
from lorarl.job import render
from lorarl_dev.node import images
from lorarl_dev.pytest_plugin import REAL_NODE_GPUS

from tests.helpers import wait_for

pytestmark = pytest.mark.node

BUSYBOX = images.BUSYBOX_IMAGE
RECORDED = pathlib.Path(__file__).resolve().parents[1] / "operator" / "recorded_pods"
FAILING_HF = "#!/bin/sh\necho 'huggingface_hub.errors.EntryNotFoundError: 404 Client Error' >&2\nexit 1\n"
# busybox has no flock applet: a stand-in so that prepare.sh gets as far as the download (the
# case without it is "no-flock"); the lock itself is irrelevant to a single preparer
FLOCK_STANDIN = "#!/bin/sh\nexit 0\n"


def prepare_container(path: str) -> dict:
    """The real prepare.sh from a ConfigMap, with PATH=path (where `hf`, and maybe `flock`, are)."""
    return {
        "name": render.PREPARE_CONTAINER,
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "/cfg/prepare.sh", "model", "Qwen/Qwen3-4B", "/tmp/models/Qwen/Qwen3-4B/main", ""],
        "env": [{"name": "PATH", "value": path}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}, {"name": "tools", "mountPath": "/tools"}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


CFG_VOLUMES = (
    {"name": "cfg", "configMap": {"name": "prepare", "defaultMode": 0o755}},
    {"name": "tools", "configMap": {"name": "tools", "defaultMode": 0o755}},
)


@pytest.fixture
def ns(real_node_cluster):
    name = f"diag-{uuid.uuid4().hex[:6]}"
    real_node_cluster.kubectl("create", "namespace", name)
    yield name
    real_node_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def container(command: str, **extra) -> dict:
    return {"name": "ray-head", "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sh", "-c", command], **extra}


def pod(name: str, *containers: dict, init: tuple[dict, ...] = (), restart: str = "Never", volumes: tuple[dict, ...] = ()) -> dict:
    spec = {"containers": list(containers), "restartPolicy": restart, "terminationGracePeriodSeconds": 0}
    if init:
        spec["initContainers"] = list(init)
    if volumes:
        spec["volumes"] = list(volumes)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {render.JOB_LABEL: name}}, "spec": spec}


CASES = {
    # name: (pod, expected reason, words the message must hold)
    "image-missing": (
        pod("image-missing", {**container("true"), "image": "docker.io/library/not-there:never"}),
        pods.IMAGE_PULL,
        ("pod image-missing container ray-head", "not-there:never", "ErrImageNeverPull"),
    ),
    "too-many-gpus": (
        pod("too-many-gpus", container("true", resources={"limits": {"amd.com/gpu": str(REAL_NODE_GPUS + 8)}})),
        pods.UNSCHEDULABLE,
        ("pod too-many-gpus cannot be scheduled", "Insufficient amd.com/gpu"),
    ),
    "secret-missing": (
        pod("secret-missing", container("true", env=[{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}])),
        pods.CONFIG_ERROR,
        ("pod secret-missing container ray-head", 'secret "wandb" not found'),
    ),
    "oom": (
        # tail holds all of /dev/zero's one endless line in memory
        pod("oom", container("head -c 200m /dev/zero | tail -n 1 > /dev/null", resources={"limits": {"memory": "32Mi"}})),
        pods.OOM_KILLED,
        ("pod oom container ray-head", "OOMKilled"),
    ),
    "download-fails": (
        pod("download-fails", container("true"), init=(prepare_container("/cfg:/tools:/bin"),), volumes=CFG_VOLUMES),
        pods.INPUT_DOWNLOAD_FAILED,
        ("pod download-fails init container prepare exited 4", "could not download model Qwen/Qwen3-4B@main"),
    ),
    "no-flock": (
        pod("no-flock", container("true"), init=(prepare_container("/cfg:/bin"),), volumes=CFG_VOLUMES),
        pods.INIT_FAILED,
        ("pod no-flock init container prepare exited 2", "flock (util-linux) is missing", "spec.dataPrep.image"),
    ),
    "crash-loop": (
        pod("crash-loop", container("echo trainer died >&2; exit 3"), restart="Always"),
        pods.CRASH_LOOP,
        ("pod crash-loop container ray-head keeps exiting", "exit code 3"),
    ),
    "claim-unbound": (
        pod(
            "claim-unbound",
            container("true", volumeMounts=[{"name": "data", "mountPath": "/data"}]),
            volumes=({"name": "data", "persistentVolumeClaim": {"claimName": "no-class"}},),
        ),
        pods.VOLUME_NOT_BOUND,
        ("pod claim-unbound waits for its PersistentVolumeClaim", "unbound"),
    ),
}


def test_each_real_pod_failure_is_named_with_its_pod_container_and_cause(real_node_cluster, ns):
    cp = real_node_cluster
    prepare = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prepare"}, "data": {"prepare.sh": render.asset("prepare.sh"), "hf": FAILING_HF}}
    tools = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tools"}, "data": {"flock": FLOCK_STANDIN}}
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "no-class"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "does-not-exist", "resources": {"requests": {"storage": "1Mi"}}},
    }
    objs = [prepare, tools, claim, *(case[0] for case in CASES.values())]
    cp.kubectl("apply", "-n", ns, "-f", "-", input="\n".join(json.dumps(o) for o in objs))

    seen: dict[str, pods.Trouble | None] = {}
    bodies: dict[str, dict] = {}

    def diagnosed() -> bool:
        listed = json.loads(cp.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
        for body in listed:
            name = body["metadata"]["name"]
            seen[name] = pods.diagnose([pods.trim_pod(body)])
            bodies[name] = body
        return all(seen.get(name) is not None and seen[name].reason == case[1] for name, case in CASES.items())

    try:
        wait_for(diagnosed, timeout=180, interval=2, what="every pod diagnosed as expected")
    except AssertionError as err:
        raise AssertionError(f"{err}; diagnosed: {seen}") from None
    for name, (_, reason, words) in CASES.items():
        trouble = seen[name]
        assert trouble.reason == reason
        for word in words:
            assert word in trouble.message, (name, trouble.message)
        assert "\n" not in trouble.message
    if os.environ.get("LORARL_RECORD_PODS"):
        RECORDED.mkdir(exist_ok=True)
        for name in CASES:
            body = bodies[name]
            body["metadata"].pop("managedFields", None)
            (RECORDED / f"{name}.json").write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
