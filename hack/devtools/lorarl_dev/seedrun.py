"""The seed LoraRLJob on the real node: its node overrides, the Hub stand-in, the images and the
operator installed with helm. Shared by tests/e2e, the bench's ``realnode`` phase and the demo.

The overrides are in one place (:func:`seed_job`): the seed manifest is kept as a user writes
it and changed only where this machine needs it (the job image instead of the miles image, CPU
and memory a 2-core machine has, a small /dev/shm and volume, the Hub stand-in's endpoint).
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from .controlplane import ControlPlane
from .errors import ControlPlaneError
from .locations import repo_root
from .waiting import wait_for

SEED_MANIFEST = repo_root() / "manifests" / "qwen3-4b-lora-amd.yaml"
CHART = repo_root() / "charts" / "lorarl-operator"
HUB_PORT = 8800  # on the node IP, inside the cluster's namespace (free there: nothing else binds it)
S3_PORT = 8801  # moto's S3 server, beside the Hub stand-in
REGISTRY_PORT = 8802  # crane's OCI registry, beside the Hub stand-in
OPERATOR_NAMESPACE = "lorarl-system"
RELEASE = "lorarl"

#: What a Ray pod may ask for on a 2-core, 24 GiB node: the head (and a worker) 500m (KubeRay turns
#: it into `ray start --num-cpus=1`, ray-operator/controllers/ray/common/pod.go, v1.5.0:
#: the CPU quantity's Value(), rounded up), room for KubeRay's submitter (500m) and two operators.
NODE_HARDWARE = {"cpu": "500m", "memory": "3Gi", "shmSize": "512Mi"}
NODE_STORAGE_SIZE = "1Gi"


def seed_job(
    *,
    image: str,
    endpoint: str,
    name: str | None = None,
    namespace: str | None = None,
    model_revision: str | None = None,
    nodes: int = 1,
    spec: Mapping[str, Any] | None = None,
    manifest: pathlib.Path = SEED_MANIFEST,
) -> dict[str, Any]:
    """The seed manifest with the node's overrides (the only place they are written).

    ``model_revision`` names a revision the Hub stand-in serves (one per test: its
    ``standin.json`` knobs); ``spec`` is merged last (a test's own fields, e.g. runPolicy)."""
    job = yaml.safe_load(manifest.read_text())
    if name:
        job["metadata"]["name"] = name
    if namespace:
        job["metadata"]["namespace"] = namespace
    s = job["spec"]
    s["hardware"].update(NODE_HARDWARE)
    if nodes != 1:
        s["hardware"]["nodes"] = nodes
    s.setdefault("runPolicy", {})["image"] = image
    s.setdefault("dataPrep", {})["endpoint"] = endpoint
    s.setdefault("checkpoint", {}).setdefault("storage", {})["size"] = NODE_STORAGE_SIZE
    if model_revision:
        s["model"]["revision"] = model_revision
    return _merge(job, {"spec": dict(spec)} if spec else {})


def apply_seed(
    cp: ControlPlane, *, image: str, endpoint: str, name: str, namespace: str, model_revision: str, nodes: int = 1, spec: Mapping[str, Any] | None = None
) -> Callable[[], str]:
    """:func:`seed_job` applied with kubectl; returns what a failing wait shows (:func:`describe`
    of the namespace), the set-up every end-to-end test starts with."""
    job = seed_job(image=image, endpoint=endpoint, name=name, namespace=namespace, model_revision=model_revision, nodes=nodes, spec=spec)
    cp.kubectl("apply", "-f", "-", input=json.dumps(job))
    return lambda: describe(cp, namespace)


def _merge(base: dict, extra: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ------------------------------------------------------------------------------ the Hub stand-in


def hub_endpoint() -> str:
    from .node.realnode import NODE_IP

    return f"http://{NODE_IP}:{HUB_PORT}"


def start_hub(cp: ControlPlane, root: pathlib.Path) -> str:
    """Serve ``root`` (:func:`lorarl_dev.hubstub.make_seed_repos`) from the cluster's namespace
    on the node IP, where pods reach it; a child of ``cp`` (stopped with it). Returns the endpoint."""
    from .node.realnode import NODE_IP

    if cp.netns is None:
        raise ControlPlaneError("the Hub stand-in runs beside a real node (ControlPlane(node=True))")
    cp.spawn("hubstub", ["-m", "lorarl_dev.hubstub", f"--root={root}", f"--host={NODE_IP}", f"--port={HUB_PORT}", "--verbose"], exe=sys.executable)
    cp.write_state()  # a detached control plane (the demo's) stops it with the rest
    endpoint = hub_endpoint()
    cp.wait_http("hubstub", f"{endpoint}/api/models/Qwen/Qwen3-4B", 30)
    return endpoint


def start_s3(cp: ControlPlane, seed: str, env: Mapping[str, str], timeout: float = 60) -> str:
    """moto's S3 server on the node IP in the cluster's namespace, where the export pod reaches it;
    ready once ``seed`` (botocore code, e.g. the bucket) ran against it. Returns the endpoint."""
    from . import moto
    from .node.netns import nsenter_prefix
    from .node.realnode import NODE_IP

    if cp.netns is None:
        raise ControlPlaneError("the S3 server runs beside a real node (ControlPlane(node=True))")
    cp.spawn("moto_server", ["-H", NODE_IP, "-p", str(S3_PORT)], exe=str(moto.python().with_name("moto_server")))
    cp.write_state()
    endpoint = f"http://{NODE_IP}:{S3_PORT}"
    deadline = time.monotonic() + timeout
    while (done := moto.run(seed, {**env, "AWS_ENDPOINT_URL": endpoint}, prefix=nsenter_prefix(cp.netns))).returncode != 0:
        cp.check_alive("moto_server")
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"moto's S3 server not ready on {endpoint}: {done.stderr[-400:]}")
        time.sleep(0.3)
    return endpoint


def start_registry(cp: ControlPlane, disk: pathlib.Path) -> str:
    """crane's OCI registry on the node IP in the cluster's namespace; returns its host:port."""
    from . import registry
    from .node.realnode import NODE_IP

    if cp.netns is None:
        raise ControlPlaneError("the registry runs beside a real node (ControlPlane(node=True))")
    disk.mkdir(parents=True, exist_ok=True)
    address = f"{NODE_IP}:{REGISTRY_PORT}"
    command = registry.serve_command(address, disk)
    cp.spawn("crane", command[1:], exe=command[0])  # named as its binary: stop() checks it by that
    cp.write_state()
    cp.wait_http("crane", f"http://{address}/v2/", 30)
    return address


# ------------------------------------------------------------------------------ images, operator


def import_images(cp: ControlPlane, names: tuple[str, ...] = ("operator", "job")) -> dict[str, str]:
    """Build (or reuse) the images and import them into the node's containerd: name -> ref."""
    from . import images
    from .node.realnode import RealNode

    node = cp.node or RealNode(cp)  # attached to a detached control plane: the node's containerd
    refs = {}
    for name in names:
        artifact = images.build(name)
        if artifact.ref not in node.images():
            node.import_image(artifact.archive)
        refs[name] = artifact.ref
    return refs


def helm(cp: ControlPlane, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [str(cp.bin_dir / "helm"), f"--kubeconfig={cp.kubeconfig}", *args]
    home = cp.workdir / "helm"  # empty config/cache/data homes: no user repositories or plugins
    env = {**os.environ, **{f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CONFIG", "CACHE", "DATA")}}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def install_operator(cp: ControlPlane, image_ref: str, *, replicas: int = 2, namespace: str = OPERATOR_NAMESPACE, timeout: float = 300) -> None:
    """``helm install`` the chart with the built image into a namespace that enforces the
    restricted Pod Security profile, and wait for every replica to be Ready (its probes)."""
    repository, tag = image_ref.rsplit(":", 1)
    cp.kubectl("create", "namespace", namespace, check=False)
    cp.kubectl(
        "label", "namespace", namespace, "--overwrite", "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest"
    )
    helm(
        cp,
        "upgrade",
        "--install",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=IfNotPresent",
        "--set",
        f"replicaCount={replicas}",
        "--set",
        "leaderElection.enabled=true",
        "--set",
        "logFormat=plain",
        # the kubelet checks readiness every 2 s, not 10 (the chart's default): `--wait` returns
        # when the replicas are Ready, not up to 10 s later
        "--set",
        "readinessProbe.periodSeconds=2",
        "--wait",
        f"--timeout={int(timeout)}s",
        timeout=timeout + 30,
    )


def installed_replicas(cp: ControlPlane, namespace: str = OPERATOR_NAMESPACE) -> int | None:
    """The replicas of the chart's Deployment when the release is installed (helm's own list),
    else None: what :func:`install_operator` puts back after :func:`uninstall_operator`."""
    releases = json.loads(helm(cp, "list", "--namespace", namespace, "--output", "json").stdout or "[]")
    if RELEASE not in {r["name"] for r in releases}:
        return None
    deployment = get(cp, "deployment", f"{RELEASE}-lorarl-operator", namespace)
    return int(deployment["spec"]["replicas"]) if deployment else 0


def uninstall_operator(cp: ControlPlane, namespace: str = OPERATOR_NAMESPACE, timeout: float = 180) -> None:
    """``helm uninstall`` the release and wait until its Deployment and every operator Pod are
    gone. The CRD stays (helm never deletes a chart's crds/), as does the namespace (made by
    :func:`install_operator`, not by the chart)."""
    helm(cp, "uninstall", RELEASE, "--namespace", namespace)
    wait_for(
        "the chart's operator Deployment and Pods gone",
        lambda: get(cp, "deployment", f"{RELEASE}-lorarl-operator", namespace) is None and not operator_pods(cp, namespace),
        timeout,
    )


def operator_pods(cp: ControlPlane, namespace: str = OPERATOR_NAMESPACE) -> list[dict]:
    out = cp.kubectl("get", "pods", "-n", namespace, "-l", "app.kubernetes.io/name=lorarl-operator", "-o", "json")
    return json.loads(out.stdout)["items"]


def leader(cp: ControlPlane, namespace: str = OPERATOR_NAMESPACE) -> str | None:
    """The Pod that holds the operator's Lease. The holder identity is ``<POD_NAME>_<random>``
    (operator/lorarl/runtime/leader.py new_identity: one per process): the Pod is the name before it."""
    pods = {p["metadata"]["name"] for p in operator_pods(cp, namespace)}
    out = cp.kubectl("get", "leases", "-n", namespace, "-o", "json")
    for lease in json.loads(out.stdout)["items"]:
        holder = lease.get("spec", {}).get("holderIdentity") or ""
        name = holder.rsplit("_", 1)[0]
        if name in pods:
            return name
    return None


def scale_operator(cp: ControlPlane, replicas: int, namespace: str = OPERATOR_NAMESPACE, timeout: float = 180) -> str:
    """Scale the chart's Deployment and wait until ``replicas`` Pods run (none terminating) and
    one of them holds the Lease; returns the leader's name."""
    cp.kubectl("scale", "deployment", "-n", namespace, f"{RELEASE}-lorarl-operator", f"--replicas={replicas}")

    def settled():
        pods = operator_pods(cp, namespace)
        ready = [p for p in pods if not p["metadata"].get("deletionTimestamp") and _ready(p)]
        holder = leader(cp, namespace)
        return holder if len(pods) == len(ready) == replicas and holder in {p["metadata"]["name"] for p in ready} else None

    return wait_for(f"{replicas} operator replica(s), one leading", settled, timeout)


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


# ------------------------------------------------------------------------------ waiting


def get(cp: ControlPlane, kind: str, name: str, namespace: str) -> dict | None:
    proc = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def job_status(cp: ControlPlane, namespace: str, name: str) -> dict:
    """The LoraRLJob's status ({} when it or its status does not exist)."""
    return ((get(cp, "lorarljob", name, namespace) or {}).get("status")) or {}


def ray_head_up(cp: ControlPlane, namespace: str, name: str) -> bool:
    """KubeRay has submitted the RayJob's Ray job (its head is up), or the job already ended: when
    a test may start a second Ray head beside it (`ray start` gives the raylet a fixed 30 s to
    register, ray/_private/node.py:409-425, Ray 2.55.1, which heads starting together on 2 loaded
    cores can miss)."""
    rayjob = get(cp, "rayjob", name, namespace) or {}
    return (rayjob.get("status") or {}).get("jobDeploymentStatus") in ("Running", "Complete", "Failed")


def rollout_at_least(cp: ControlPlane, namespace: str, name: str, k: int) -> dict | None:
    """The status once it says rollout >= ``k`` (how a test observes "mid-run"); a run that ended
    before that fails the wait at once, with KubeRay's reason, instead of running out its time."""
    st = job_status(cp, namespace, name)
    if st.get("phase") in ("Succeeded", "Failed") and (st.get("progress") or {}).get("rollout", -1) < k:
        raise AssertionError(f"{namespace}/{name} ended {st['phase']} before rollout {k}: {st.get('rayJob')}")
    return st if (st.get("progress") or {}).get("rollout", -1) >= k else None


def pods(cp: ControlPlane, namespace: str, selector: str | None = None) -> list[dict]:
    out = cp.kubectl("get", "pods", "-n", namespace, *(("-l", selector) if selector else ()), "-o", "json")
    return json.loads(out.stdout)["items"]


def wait_finished(cp: ControlPlane, namespace: str, name: str, timeout: float, explain: Callable[[], str] | None = None) -> dict:
    """The status once the phase is Succeeded or Failed."""

    def finished():
        st = job_status(cp, namespace, name)
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    return wait_for(f"LoraRLJob {namespace}/{name} finished", finished, timeout, explain=explain)


def describe(cp: ControlPlane, namespace: str) -> str:
    """What a failing wait shows: the namespace's objects, events and the pods' recent logs."""
    parts = []
    for args in (
        ("get", "lorarljobs,rayjobs,rayclusters,jobs,pods,pvc", "-n", namespace, "-o", "wide"),
        ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
        ("get", "lorarljobs", "-n", namespace, "-o", "jsonpath={.items[*].status}"),
    ):
        parts.append(cp.kubectl(*args, check=False).stdout[-4000:])
    pods = json.loads(cp.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False).stdout or '{"items":[]}')
    for pod in pods["items"]:
        name = pod["metadata"]["name"]
        logs = cp.kubectl("logs", "-n", namespace, name, "--all-containers", "--tail=25", check=False)
        parts.append(f"--- {name}\n{logs.stdout[-3000:]}{logs.stderr[-500:]}")
    return "\n".join(parts)
