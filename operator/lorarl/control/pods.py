"""Pure: the pods of a job's Ray cluster -> why it does not start (a reason and one line).

The operator watches the pods labelled ``lorarl.dev/job`` (render puts the label on the head
and worker templates, KubeRay copies it to the pods) and keeps only what this module reads
(``trim_pod``). ``diagnose`` names the first trouble it finds, worst first, in the words of the
component that saw it: the scheduler's PodScheduled message, the kubelet's waiting reason and
message, a terminated container's exit code and termination message (prepare.sh writes one
naming the input it could not fetch). Reasons and remedies: docs/troubleshooting.md.

``node_not_ready`` names a running pod whose node stopped reporting: the node controller then sets
the pod's Ready condition False and leaves ContainersReady, which only the kubelet writes
(kubernetes v1.37.2 pkg/controller/nodelifecycle/node_lifecycle_controller.go:766-773, when the
node's Ready turns from True, 50 s after its last report by default; MarkPodsNotReady in
pkg/controller/util/node/controller_utils.go:119-150 changes Ready only), so Ready False beside
ContainersReady True is the node's doing, not a probe's (Ray pods carry no readiness gates).

The kubelet's reasons are those of kubelet/images/types.go (ErrImagePull, ImagePullBackOff,
InvalidImageName, ErrImageNeverPull), kubelet/kuberuntime/kuberuntime_container.go
(CreateContainerConfigError, CreateContainerError) and pkg/kubelet/container/sync_result.go
(CrashLoopBackOff); OOMKilled is the runtime's terminated reason (containerd's CRI).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..job.render import COMPONENT_LABEL, EXPORT_ROLLOUT_LABEL, JOB_LABEL, PREPARE_CONTAINER
from ..reporter.text import printable
from .driver import CLUSTER_LABEL, NODE_TYPE_LABEL
from .gpuhours import GPU_RESOURCES

# reasons in the LoraRLJob status (docs/troubleshooting.md has a section per reason)
IMAGE_PULL = "ImagePullBackOff"
CONFIG_ERROR = "CreateContainerConfigError"
INIT_FAILED = "InitContainerFailed"
INPUT_DOWNLOAD_FAILED = "InputDownloadFailed"
OOM_KILLED = "OOMKilled"
CRASH_LOOP = "CrashLoopBackOff"
UNSCHEDULABLE = "Unschedulable"
VOLUME_NOT_BOUND = "VolumeNotBound"
REASONS = (IMAGE_PULL, CONFIG_ERROR, INIT_FAILED, INPUT_DOWNLOAD_FAILED, OOM_KILLED, CRASH_LOOP, UNSCHEDULABLE, VOLUME_NOT_BOUND)  # diagnose's
NODE_NOT_READY = "NodeNotReady"  # node_not_ready's (a running job)

_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
_CONFIG_REASONS = ("CreateContainerConfigError", "CreateContainerError")
PREPARE_FETCH_EXIT = 4  # prepare.sh's exit code for a download that failed
CRASH_LOOP_RESTARTS = 3  # a container running again after this many exits is still crash-looping
MAX_MESSAGE = 1024  # an Event's message limit
_KEPT_CONDITIONS = ("PodScheduled", "Ready", "ContainersReady")
# the taints a node that stops being Ready gets; a pod's toleration of them (300 s unless it says
# otherwise: the DefaultTolerationSeconds admission plugin) is how long it stays bound there
_NODE_GONE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


@dataclass(frozen=True)
class Trouble:
    reason: str
    message: str
    stuck: bool  # a human must fix it (False: it may resolve itself, e.g. a scale-up)


def _gpu_resources(container: dict[str, Any]) -> dict[str, Any]:
    """A container's GPU requests and limits only (what gpuhours.pod_gpus reads)."""
    resources = container.get("resources") or {}
    kept = {kind: {r: v for r, v in (resources.get(kind) or {}).items() if r in GPU_RESOURCES} for kind in ("requests", "limits")}
    return {"name": container.get("name"), "resources": {k: v for k, v in kept.items() if v}}


def trim_pod(body: dict[str, Any], cached: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``diagnose``, ``driver`` and ``gpuhours`` read of a pod (``cached`` unused: the signature of
    cache.Store's trim)."""
    meta = body.get("metadata") or {}
    st = body.get("status") or {}
    spec = body.get("spec") or {}

    def container(cs: dict[str, Any]) -> dict[str, Any]:
        out = {"name": cs.get("name"), "image": cs.get("image"), "restartCount": cs.get("restartCount", 0)}
        for key in ("state", "lastState"):
            state = cs.get(key) or {}
            for which in ("waiting", "terminated"):
                if which in state:
                    part = state[which] or {}
                    out[key] = {which: {k: part[k] for k in ("reason", "message", "exitCode", "finishedAt") if k in part}}
        return out

    return {
        "metadata": {
            **{k: meta[k] for k in ("namespace", "name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp") if k in meta},
            # the job's, KubeRay's cluster and node type (driver.py finds the head of the current cluster), and the
            # component, which tells the export Job's pod from the Ray cluster's (adapter_status.export_pods)
            "labels": {
                k: v for k, v in (meta.get("labels") or {}).items() if k in (JOB_LABEL, CLUSTER_LABEL, NODE_TYPE_LABEL, COMPONENT_LABEL, EXPORT_ROLLOUT_LABEL)
            },
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "evictAfterSeconds": _evict_after(spec),
            "images": {c.get("name"): c.get("image") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])},
            "initContainers": [_gpu_resources(c) for c in spec.get("initContainers") or []],
            "containers": [_gpu_resources(c) for c in spec.get("containers") or []],
        },
        "status": {
            "phase": st.get("phase"),
            "conditions": [
                {k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c}
                for c in st.get("conditions") or []
                if c.get("type") in _KEPT_CONDITIONS
            ],
            "initContainerStatuses": [container(c) for c in st.get("initContainerStatuses") or []],
            "containerStatuses": [container(c) for c in st.get("containerStatuses") or []],
        },
    }


def _evict_after(spec: dict[str, Any]) -> int | None:
    """Seconds the pod stays bound to a node that stopped being Ready (the shortest NoExecute
    toleration of its taints); None: no such toleration (evicted at once, or never)."""
    seconds = [
        t["tolerationSeconds"]
        for t in spec.get("tolerations") or []
        if t.get("key") in _NODE_GONE_TAINTS and t.get("effect") in (None, "NoExecute") and isinstance(t.get("tolerationSeconds"), int)
    ]
    return min(seconds) if seconds else None


def _one_line(text: str | None) -> str:
    """The last non-empty line (a FallbackToLogsOnError message is a log's tail)."""
    lines = [printable(line).strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1] if lines else ""


def _restarts(cs: dict[str, Any]) -> str:
    n = cs.get("restartCount", 0) or 0
    return f"{n} restart{'' if n == 1 else 's'}"


def _cut(text: str) -> str:
    text = printable(text)  # the scheduler's message, pod and container names, too
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _terminated(cs: dict[str, Any]) -> dict[str, Any] | None:
    """The container's current termination, else its last one (a restart is waiting)."""
    return ((cs.get("state") or {}).get("terminated")) or ((cs.get("lastState") or {}).get("terminated"))


def _pod_trouble(pod: dict[str, Any]) -> list[tuple[int, Trouble]]:
    """(rank, trouble) of one pod; a lower rank is worse (a broken spec before a full cluster)."""
    name = pod["metadata"].get("name", "?")
    st = pod.get("status") or {}
    images = (pod.get("spec") or {}).get("images") or {}
    found: list[tuple[int, Trouble]] = []
    for kind, statuses in (("init container", st.get("initContainerStatuses") or []), ("container", st.get("containerStatuses") or [])):
        for cs in statuses:
            where = f"pod {name} {kind} {cs.get('name')}"
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason, message = waiting.get("reason"), _one_line(waiting.get("message"))
            ended = _terminated(cs) or {}
            if reason in _PULL_REASONS:
                image = images.get(cs.get("name")) or cs.get("image") or "?"
                found.append((0, Trouble(IMAGE_PULL, f"{where}: cannot pull image {image} ({reason}): {message}", True)))
            elif reason in _CONFIG_REASONS:
                found.append((0, Trouble(CONFIG_ERROR, f"{where}: {message or reason}", True)))
            elif ended.get("reason") == "OOMKilled":
                found.append((1, Trouble(OOM_KILLED, f"{where} was killed for exceeding its memory limit (OOMKilled, {_restarts(cs)})", True)))
            elif kind == "init container" and ended.get("exitCode") not in (None, 0):
                code, said = ended["exitCode"], _one_line(ended.get("message"))
                why = INPUT_DOWNLOAD_FAILED if cs.get("name") == PREPARE_CONTAINER and code == PREPARE_FETCH_EXIT else INIT_FAILED
                found.append((1, Trouble(why, f"{where} exited {code}" + (f": {said}" if said else "") + f" ({_restarts(cs)})", True)))
            elif reason == "CrashLoopBackOff" or (
                kind == "container"
                and cs.get("restartCount", 0)
                and ended.get("exitCode") not in (None, 0)
                and (cs.get("state") or cs.get("restartCount", 0) >= CRASH_LOOP_RESTARTS)
            ):
                # the kubelet's back-off, or caught between two restarts: terminated, or (after a
                # few) just started again. Running again after one or two exits it may have
                # recovered: a Ray head whose raylet missed its 30 s to register on a loaded node
                code, said = ended.get("exitCode"), _one_line(ended.get("message"))
                found.append(
                    (
                        1,
                        Trouble(
                            CRASH_LOOP,
                            f"{where} keeps exiting (exit code {code}" + (f": {said}" if said else "") + f"; {_restarts(cs)})",
                            True,
                        ),
                    )
                )
    for cond in st.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            said = cond.get("message") or "the scheduler found no node"
            if "unbound" in said and "PersistentVolumeClaim" in said:
                found.append((2, Trouble(VOLUME_NOT_BOUND, f"pod {name} waits for its PersistentVolumeClaim to bind: {said}", False)))
            else:
                found.append((3, Trouble(UNSCHEDULABLE, f"pod {name} cannot be scheduled: {said}", False)))
    return found


def current(pods: list[dict[str, Any]], cluster: str | None) -> list[dict[str, Any]]:
    """The pods whose troubles are the run's now: none being deleted, and of the Ray cluster the
    RayJob names (``status.rayClusterName``) when it names one; a pod of no cluster (the
    submitter's) counts. A retry's old cluster goes away with its pods' troubles."""
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and (cluster is None or (p["metadata"].get("labels") or {}).get(CLUSTER_LABEL, cluster) == cluster)
    ]


def node_not_ready(pods: list[dict[str, Any]]) -> Trouble | None:
    """A running pod (the first by name) whose node stopped being Ready: its containers may still
    run, but nothing reports them, and the pod is evicted once its toleration runs out."""
    for pod in sorted(pods, key=lambda p: p["metadata"].get("name", "")):
        st, spec = pod.get("status") or {}, pod.get("spec") or {}
        if st.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            continue
        conditions = {c.get("type"): c for c in st.get("conditions") or []}
        ready, containers = conditions.get("Ready") or {}, conditions.get("ContainersReady") or {}
        if ready.get("status") != "False" or containers.get("status") != "True":
            continue
        since = f" since {ready['lastTransitionTime']}" if ready.get("lastTransitionTime") else ""
        evict = spec.get("evictAfterSeconds")
        when = f"{evict} s after the node was marked (its toleration of {_NODE_GONE_TAINTS[0]})" if evict is not None else "soon"
        return Trouble(
            NODE_NOT_READY,
            _cut(
                f"pod {pod['metadata'].get('name', '?')}: its node {spec.get('nodeName') or '?'} is not ready{since} (the node controller"
                f" marked the pod not ready; its containers may still run). If the node does not return, Kubernetes evicts the pod {when}"
                " and the attempt fails: retried from the latest save while spec.runPolicy.backoffLimit allows"
            ),
            False,
        )
    return None


def diagnose(pods: list[dict[str, Any]]) -> Trouble | None:
    """The worst trouble among the pods (ties: the pod that sorts first by name), or None."""
    found = [(rank, pod["metadata"].get("name", ""), trouble) for pod in pods for rank, trouble in _pod_trouble(pod)]
    if not found:
        return None
    _, _, trouble = min(found, key=lambda item: (item[0], item[1]))
    return Trouble(trouble.reason, _cut(trouble.message), trouble.stuck)
