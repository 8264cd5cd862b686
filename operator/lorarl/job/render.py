"""Pure renderer: a LoraRLJob in, its child manifests out (dicts, deterministic).

Children, in apply order: the per-job ServiceAccount, Role and RoleBinding (the in-job reporter
may update this job's status and nothing else; the chart's ValidatingAdmissionPolicy narrows
that to the reporter's own status keys), the ConfigMap with the prepare script (the reporter
is not in it: the Ray head's init container copies it from the tools image, one image for every
job, ``settings.RenderSettings.tools_image``), the owned PVC (unless an existing claim is used), the NetworkPolicy that admits
to the job's Ray pods only the job's own pods and KubeRay's operator on the dashboard port (unless
the operator's settings turn it off: ``settings.RenderSettings``) and the RayJob.

Nothing secret is rendered: Secrets are referenced through ``secretKeyRef`` only. Labels and
annotations of the LoraRLJob are not copied to children (GitOps tools track resources by them).
"""

from __future__ import annotations

import functools
import importlib.resources
import ipaddress
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from typing import Any

import yaml

from ..adapter import egress
from ..api.types import API_VERSION, KIND, DatasetRef, EvalDataset, LoraRLJob, SecretKeyRef
from ..reporter.spool import SPOOL_ENV
from . import command, paths, profiles
from .settings import DEFAULT as DEFAULT_SETTINGS
from .settings import NAMESPACE_NAME_LABEL, EgressSettings, NetworkPolicySettings, RenderSettings

RAYJOB_API_VERSION = "ray.io/v1"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass (jobframework/interface.go:222-227 in Kueue v0.17.0)
JOB_LABEL = "lorarl.dev/job"
MANAGED_BY = "lorarl-operator"
DATA_VOLUME = "data"
SHM_VOLUME = "dshm"
DASHBOARD_PORT = 8265  # Ray's dashboard / job API: KubeRay's dashboard client polls it (utils/constant.go:98 in v1.5.1)
RUNTIME_ENV_AGENT_PORT = "8266"  # Ray's dashboard is 8265; nothing of Ray's listens on 8266 by default
REPORTER_VOLUME = "lorarl"  # an emptyDir: the reporter zipapp, copied from the tools image
REPORTER_VOLUME_SIZE = "8Mi"  # the zipapp is ~90 KB
PREPARE_VOLUME = "lorarl-prepare"  # the job's ConfigMap: prepare.sh and fetch.py
# The reporter's API credentials: a projected, short-lived token of the pod's ServiceAccount,
# mounted only in the head pod's reporter sidecar. The trainer's container (the head's Ray
# container, where KubeRay runs the entrypoint) holds none: its reporter spools each status to a
# volume the sidecar shares, and the sidecar sends it (lorarl/reporter/spool.py).
API_ACCESS_VOLUME = "lorarl-api-access"
STATUS_SPOOL_VOLUME = "lorarl-status"
STATUS_SPOOL_PATH = "/var/run/lorarl-status"
SIDECAR_CONTAINER = "lorarl-reporter"
SIDECAR_RESOURCES = {"limits": {"memory": "128Mi"}, "requests": {"cpu": "10m", "memory": "64Mi"}}
REPORTER_INSTALL_CONTAINER = "lorarl-reporter-install"
REPORTER_INSTALL_RESOURCES = {"limits": {"memory": "32Mi"}, "requests": {"cpu": "10m", "memory": "16Mi"}}
TOOLS_USER = 65532  # the operator image's own user (Dockerfile)
TOOLS_PYTHON = "/opt/venv/bin/python3"  # the tools image's interpreter with lorarl (Dockerfile)
API_ACCESS_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"  # reporter/kubeapi.py SA_DIR
API_ACCESS_EXPIRATION_SECONDS = 3600  # the kubelet renews it at 80% of its life; the reporter re-reads it
DEFAULT_STORAGE_SIZE = "200Gi"
WORKER_GROUP = "gpu-workers"
PREPARE_CONTAINER = "prepare"
# Subdirectories of the job volume mounted at the paths the recipe uses.
DATA_MOUNTS = (("models", paths.MODELS_DIR), ("datasets", paths.DATASETS_DIR), ("shared_data", paths.SHARED_DIR))


# ------------------------------------------------------------------------------------- names


def rayjob_name(job: LoraRLJob) -> str:
    return job.metadata.name


def configmap_name(job: LoraRLJob) -> str:
    return f"{job.metadata.name}-lorarl"


def reporter_account_name(job: LoraRLJob) -> str:
    return f"{job.metadata.name}-reporter"


def pvc_name(job: LoraRLJob) -> str:
    return f"{job.metadata.name}-data"


def claim_name(job: LoraRLJob) -> str:
    return job.spec.checkpoint.storage.existing_claim or pvc_name(job)


def network_policy_name(job: LoraRLJob) -> str:
    return f"{job.metadata.name}-ray"


def pod_service_account(job: LoraRLJob) -> str:
    return job.spec.scheduling.service_account_name or reporter_account_name(job)


# ---------------------------------------------------------------------------------- metadata

COMPONENT_LABEL = "app.kubernetes.io/component"
EXPORT_ROLLOUT_LABEL = "lorarl.dev/export-rollout"  # an export at a save (spec.export.onSave): its rollout
RAY_COMPONENTS = ("ray-head", "ray-worker")  # the pods the NetworkPolicy protects
JOB_COMPONENTS = (*RAY_COMPONENTS, "submitter")  # the pods it admits on every port


def labels(job: LoraRLJob, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "lorarl",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "lorarl",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        JOB_LABEL: job.metadata.name,
    }


def owner_references(job: LoraRLJob) -> list[dict[str, Any]]:
    """Controller reference to the LoraRLJob (only once it exists and has a uid)."""
    if not job.metadata.uid:
        return []
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": job.metadata.name,
            "uid": job.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def metadata(job: LoraRLJob, name: str, component: str, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": {**labels(job, component), **(extra_labels or {})},
    }
    refs = owner_references(job)
    if refs:
        meta["ownerReferences"] = refs
    return meta


# ---------------------------------------------------------------------------- NetworkPolicy


def job_pods_selector(job: LoraRLJob, components: tuple[str, ...]) -> dict[str, Any]:
    """This job's pods of these components: the labels the pod templates carry (KubeRay keeps a
    template's labels on the pods it makes, common/pod.go labelPod; the submitter's template is
    the Job's as given, rayjob_controller.go getSubmitterTemplate)."""
    return {
        "matchLabels": {JOB_LABEL: job.metadata.name, "app.kubernetes.io/managed-by": MANAGED_BY},
        "matchExpressions": [{"key": COMPONENT_LABEL, "operator": "In", "values": list(components)}],
    }


def network_policy(job: LoraRLJob, settings: NetworkPolicySettings) -> dict[str, Any]:
    """Ingress to the job's Ray head and workers: from the job's own pods (head, workers and the
    submitter) on every port (Ray's GCS, raylet, object manager and worker ports are many and
    partly dynamic), and from KubeRay's operator on the dashboard port only (its dashboard client
    polls the job there: rayjob_controller.go:280-285 in KubeRay v1.5.0, at the head Service's
    dashboard port, utils/util.go:846-876). Egress stays open (downloads, W&B). `kubectl
    port-forward` goes through the kubelet, which NetworkPolicy does not filter."""
    namespaces, pods = dict(settings.kuberay_namespace_labels), dict(settings.kuberay_pod_labels)
    if settings.kuberay_namespace:  # KubeRay's namespace by its name (issue 35, point 6): not any namespace
        namespaces[NAMESPACE_NAME_LABEL] = settings.kuberay_namespace
    kuberay: dict[str, Any] = {  # {}: every namespace, every pod
        "namespaceSelector": {"matchLabels": namespaces} if namespaces else {},
        "podSelector": {"matchLabels": pods} if pods else {},
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(job, network_policy_name(job), "network-policy"),
        "spec": {
            "podSelector": job_pods_selector(job, RAY_COMPONENTS),
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": job_pods_selector(job, JOB_COMPONENTS)}]},
                {"from": [kuberay], "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}]},
            ],
        },
    }


def egress_policy_name(job: LoraRLJob, component: str) -> str:
    return f"{job.metadata.name}-{component}-egress"


DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def _literal_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def outside_peers(settings: EgressSettings) -> list[dict[str, Any]]:
    """Every address but link-local and the cluster's own ranges (security.clusterCIDRs; loopback
    never leaves a pod), plus the ranges the install allows: where a host NAME may resolve to."""
    refused = [ipaddress.ip_network(c) for c, what in egress.ALWAYS_REFUSED if what == "link-local"]
    refused += list(egress.parse_cidrs(settings.refused_cidrs))
    peers = []
    for everything in (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")):
        excepted = sorted({str(n) for n in refused if n.version == everything.version and n != everything})
        peers.append({"ipBlock": {"cidr": str(everything), **({"except": excepted} if excepted else {})}})
    peers += [{"ipBlock": {"cidr": str(n)}} for n in egress.parse_cidrs(settings.allowed_cidrs)]
    return peers


def egress_policy(job: LoraRLJob, component: str, targets: list[tuple[str, int]], settings: EgressSettings) -> dict[str, Any]:
    """Egress of the job's pods of ``component`` (the export's, the load's): DNS (port 53 to any
    peer: where the cluster's resolver runs is not portable), and each target (host, port) on
    its TCP port only: a literal IP as that address alone; a host name, which a NetworkPolicy
    cannot name, to every address but link-local and the cluster's own ranges
    (``outside_peers``). No target (a claim destination alone): no egress at all.
    What it cannot say (docs/security.md): which host a name is; a Service's port after the
    Service's translation (policies see the pod's port and address)."""
    rules: list[dict[str, Any]] = []
    if targets:
        rules.append({"ports": [dict(p) for p in DNS_PORTS]})
    pods = egress.Policy(egress.parse_cidrs(settings.refused_cidrs), egress.parse_cidrs(settings.allowed_cidrs))
    for host, port in sorted(set(targets)):
        ip = _literal_ip(host)
        if ip is not None and pods.why_refused(str(ip)):
            continue  # an address the pod refuses too (the cluster's own, not allowed): no way there
        to = [{"ipBlock": {"cidr": str(ipaddress.ip_network(ip))}}] if ip is not None else outside_peers(settings)
        rules.append({"to": to, "ports": [{"protocol": "TCP", "port": port}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(job, egress_policy_name(job, component), "network-policy"),
        "spec": {
            "podSelector": job_pods_selector(job, (component,)),
            "policyTypes": ["Egress"],
            "egress": rules,
        },
    }


def egress_env(settings: EgressSettings) -> list[dict[str, Any]]:
    """The pod's copy of the ranges it refuses (lorarl.adapter.egress reads them; none: no variable)."""
    pairs = ((egress.REFUSED_ENV, settings.refused_cidrs), (egress.ALLOWED_ENV, settings.allowed_cidrs))
    return [{"name": name, "value": ",".join(cidrs)} for name, cidrs in pairs if cidrs]


# ------------------------------------------------------------------------------------ assets


def asset_path(name: str) -> Traversable:
    """A file shipped in lorarl/job/assets (the prepare script)."""
    return importlib.resources.files("lorarl.job").joinpath("assets", name)


@functools.cache
def asset(name: str) -> str:
    return asset_path(name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------ RBAC objects


def service_account(job: LoraRLJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(job, reporter_account_name(job), "reporter"),
        # no token in every container: only the head's Ray container mounts one (api_access_volume)
        "automountServiceAccountToken": False,
    }


def reporter_role(job: LoraRLJob) -> dict[str, Any]:
    """Allows reading this one LoraRLJob and patching its status: nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(job, reporter_account_name(job), "reporter"),
        "rules": [
            {
                "apiGroups": ["lorarl.dev"],
                "resources": ["lorarljobs/status"],
                "resourceNames": [job.metadata.name],
                "verbs": ["get", "patch"],
            },
            {
                "apiGroups": ["lorarl.dev"],
                "resources": ["lorarljobs"],
                "resourceNames": [job.metadata.name],
                "verbs": ["get"],
            },
        ],
    }


def reporter_role_binding(job: LoraRLJob) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(job, reporter_account_name(job), "reporter"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": reporter_account_name(job)},
        "subjects": [{"kind": "ServiceAccount", "name": pod_service_account(job), "namespace": job.metadata.namespace}],
    }


def configmap(job: LoraRLJob) -> dict[str, Any]:
    """What is the job's own in its pods: the prepare script and its downloader. The reporter is
    not here (every (re)apply would send it): it comes from the tools image."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job, configmap_name(job), "reporter"),
        "data": {"prepare.sh": asset("prepare.sh"), "fetch.py": asset("fetch.py")},
    }


def persistent_volume_claim(job: LoraRLJob) -> dict[str, Any] | None:
    storage = job.spec.checkpoint.storage
    if storage.existing_claim:
        return None
    modes = storage.access_modes or (["ReadWriteOnce"] if job.spec.hardware.nodes == 1 else ["ReadWriteMany"])
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": storage.size or DEFAULT_STORAGE_SIZE}},
    }
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    meta = metadata(job, pvc_name(job), "data")
    if job.spec.checkpoint.retain == "Retain":
        # no owner: the garbage collector leaves it when the job goes (docs/adapters.md)
        meta.pop("ownerReferences", None)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


# ----------------------------------------------------------------------------------- the pods


def secret_env(name: str, ref: SecretKeyRef) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def ray_env(job: LoraRLJob) -> list[dict[str, Any]]:
    """Environment of every Ray container: the profile's (ROCm) env, then the node address the
    launcher exported, then tracking. Order matters: no_proxy expands $(MASTER_ADDR)."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in profiles.profile_of(job).env.items()]
    env += [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "MASTER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "no_proxy", "value": "127.0.0.1,$(MASTER_ADDR)"},
    ]
    wandb = job.spec.tracking.wandb
    if wandb is not None:
        env.append(secret_env("WANDB_API_KEY", wandb.api_key_secret_ref))
        if wandb.host:
            env.append({"name": "WANDB_BASE_URL", "value": wandb.host})
    return env


def gpu_resource(job: LoraRLJob) -> str:
    return job.spec.hardware.resource_name or profiles.profile_of(job).resource_name


def ray_resources(job: LoraRLJob) -> dict[str, Any]:
    hw = job.spec.hardware
    gpus = str(profiles.gpus_per_node(job))
    requests: dict[str, str] = {gpu_resource(job): gpus}
    limits: dict[str, str] = {gpu_resource(job): gpus}
    if hw.cpu:
        requests["cpu"] = hw.cpu
    if hw.memory:
        requests["memory"] = hw.memory
        limits["memory"] = hw.memory
    return {"limits": dict(sorted(limits.items())), "requests": dict(sorted(requests.items()))}


def data_volume_mounts() -> list[dict[str, Any]]:
    return [{"name": DATA_VOLUME, "mountPath": path, "subPath": sub} for sub, path in DATA_MOUNTS]


def ray_volume_mounts(head: bool) -> list[dict[str, Any]]:
    """The job volume and /dev/shm; on the head (where KubeRay runs the entrypoint) also the
    reporter, read-only."""
    mounts = [*data_volume_mounts(), {"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    if head:
        mounts.append({"name": REPORTER_VOLUME, "mountPath": paths.REPORTER_DIR, "readOnly": True})
    return mounts


def volumes(job: LoraRLJob, head: bool) -> list[dict[str, Any]]:
    out = [
        {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim_name(job)}},
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": job.spec.hardware.shm_size}},
    ]
    if head:
        out.append({"name": REPORTER_VOLUME, "emptyDir": {"sizeLimit": REPORTER_VOLUME_SIZE}})
        if not job.spec.data_prep.skip:
            out.append({"name": PREPARE_VOLUME, "configMap": {"name": configmap_name(job), "defaultMode": 0o555}})
    return out


def api_access_volume() -> dict[str, Any]:
    """What the kubelet's automount would give (token, cluster CA, namespace), as an explicit
    volume so that it can be mounted into one container only."""
    return {
        "name": API_ACCESS_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": API_ACCESS_EXPIRATION_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }


def container_security_context() -> dict[str, Any]:
    """Every container: no capability (ROCm and Ray need none: the device plugin hands over the
    device nodes, docs/security.md#pods) and no way to gain privileges (setuid binaries)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def tools_security_context() -> dict[str, Any]:
    """The tools image's containers (our own image, whatever the job's image allows): the
    image's non-root user, a read-only root, no capability, the runtime's seccomp filter."""
    return {
        **container_security_context(),
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": TOOLS_USER,
        "runAsGroup": TOOLS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context(job: LoraRLJob, gpus: bool) -> dict[str, Any]:
    """The container runtime's default seccomp filter always; a non-root user, and the host's
    GPU device groups, when the spec says the image allows it (Pod Security "restricted")."""
    ctx: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    uid = job.spec.run_policy.run_as_user
    if uid is not None:
        # fsGroup: the job volume becomes writable for that user; OnRootMismatch skips the
        # recursive chown of a model-sized volume on every start once its root is right
        ctx |= {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid, "fsGroupChangePolicy": "OnRootMismatch"}
    if gpus and job.spec.hardware.device_groups:
        ctx["supplementalGroups"] = list(job.spec.hardware.device_groups)
    return ctx


def image(job: LoraRLJob) -> str:
    return job.spec.run_policy.image or profiles.profile_of(job).image


def downloads(job: LoraRLJob) -> list[str]:
    """prepare.sh arguments: (kind, source, local dir, revision) per input, in recipe order. kind
    is model or dataset (from the Hub), uri (an https:// or s3:// download) or path (already on
    the volume: only checked)."""
    model = job.spec.model
    if model.path:
        items = [("path", paths.model_dir(job), paths.model_dir(job), "")]
    elif model.uri:
        items = [("uri", model.uri, paths.model_dir(job), "")]
    else:
        items = [("model", model.name, paths.model_dir(job), model.revision or "")]
    datasets: list[DatasetRef | EvalDataset] = [job.spec.rollout.prompt_data, *(job.spec.eval.datasets if job.spec.eval.enabled else [])]
    for ds in datasets:
        if ds.path:
            items.append(("path", paths.dataset_file(ds), paths.dataset_file(ds), ""))
        elif ds.uri:
            items.append(("uri", ds.uri, paths.dataset_dir(ds), ""))
        else:
            items.append(("dataset", ds.repo or "", paths.dataset_dir(ds), ds.revision or ""))
    seen: set[tuple[str, str]] = set()
    args: list[str] = []
    for kind, source, path, rev in items:
        if (source, path) in seen:  # two eval sets from one repository download once
            continue
        seen.add((source, path))
        args += [kind, source, path, rev]
    return args


def prepare_env(job: LoraRLJob) -> list[dict[str, Any]]:
    """The prepare container's environment: Hub settings, and for URI inputs the S3 store and
    the credentials, every secret from its Secret (secretKeyRef), never a value in the spec."""
    prep = job.spec.data_prep
    env: list[dict[str, Any]] = [
        {"name": "HF_HUB_ENABLE_HF_TRANSFER", "value": "0"},
        {"name": "LORARL_RUN_DIR", "value": paths.run_dir(job)},
    ]
    if prep.endpoint:
        env.append({"name": "HF_ENDPOINT", "value": prep.endpoint})
    if prep.hf_token_secret_ref:
        env.append(secret_env("HF_TOKEN", prep.hf_token_secret_ref))
    if prep.http_token_secret_ref:
        env.append(secret_env("LORARL_HTTP_TOKEN", prep.http_token_secret_ref))
    if prep.s3:
        if prep.s3.endpoint:
            env.append({"name": "AWS_ENDPOINT_URL", "value": prep.s3.endpoint})
        env.append({"name": "AWS_DEFAULT_REGION", "value": prep.s3.region})
        if prep.s3.credentials_secret_name:
            for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                env.append({"name": key, "valueFrom": {"secretKeyRef": {"name": prep.s3.credentials_secret_name, "key": key}}})
    return env


def prepare_container(job: LoraRLJob) -> dict[str, Any]:
    """Downloads model and datasets onto the job volume; skips what is complete, resumes the rest."""
    prep = job.spec.data_prep
    env = prepare_env(job)
    return {
        "name": PREPARE_CONTAINER,
        "image": prep.image or image(job),
        "imagePullPolicy": job.spec.run_policy.image_pull_policy,
        "command": ["sh", f"{paths.PREPARE_DIR}/prepare.sh"],
        "args": downloads(job),
        "env": env,
        "volumeMounts": [*data_volume_mounts(), {"name": PREPARE_VOLUME, "mountPath": paths.PREPARE_DIR, "readOnly": True}],
        "securityContext": container_security_context(),
        # prepare.sh writes a one-line message naming the input it could not fetch; a failure
        # it did not foresee leaves the log's tail there instead (core/v1 types.go)
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def reporter_install_container(tools_image: str) -> dict[str, Any]:
    """Copies the reporter zipapp from the tools image into the head pod's reporter volume, the
    way the OpenTelemetry operator gives a Python app its agent (an init container from the
    agent's image runs `cp` into an emptyDir the app mounts: internal/instrumentation/python.go
    injectPythonSDKToPod and helper.go instrVolume, open-telemetry/opentelemetry-operator)."""
    return {
        "name": REPORTER_INSTALL_CONTAINER,
        "image": tools_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["cp", paths.TOOLS_REPORTER_PATH, paths.REPORTER_PATH],
        "resources": REPORTER_INSTALL_RESOURCES,
        "volumeMounts": [{"name": REPORTER_VOLUME, "mountPath": paths.REPORTER_DIR}],
        "securityContext": tools_security_context(),
    }


def reporter_sidecar(job: LoraRLJob, tools_image: str) -> dict[str, Any]:
    """The head pod's token holder: sends the statuses the reporter next to the trainer spools
    (lorarl's own interpreter in the tools image runs ``-m lorarl.reporter sidecar``: its
    ``python3`` on PATH is the exporter's, without lorarl, see the Dockerfile); the only
    container with the API token mounted."""
    return {
        "name": SIDECAR_CONTAINER,
        "image": tools_image,
        "imagePullPolicy": "IfNotPresent",
        "command": [TOOLS_PYTHON, "-m", "lorarl.reporter", "sidecar"],
        "args": ["--namespace", job.metadata.namespace, "--name", job.metadata.name, "--spool", STATUS_SPOOL_PATH],
        "resources": SIDECAR_RESOURCES,
        "volumeMounts": [
            {"name": STATUS_SPOOL_VOLUME, "mountPath": STATUS_SPOOL_PATH},
            {"name": API_ACCESS_VOLUME, "mountPath": API_ACCESS_PATH, "readOnly": True},
        ],
        "securityContext": tools_security_context(),
    }


def pod_template(job: LoraRLJob, container_name: str, head: bool, tools_image: str) -> dict[str, Any]:
    mounts = ray_volume_mounts(head)
    pod_volumes = volumes(job, head)
    env = ray_env(job)
    # The reporter runs in the head's Ray container (KubeRay runs the entrypoint there) and, with
    # the per-job account, spools to the sidecar, the only container with the token. A user-named
    # account decides itself: the head pod leaves automountServiceAccountToken unset, so the
    # ServiceAccount admission plugin mounts a token (in every container) only if the account
    # does not opt out (plugin/pkg/admission/serviceaccount/admission.go, shouldAutomount: the
    # pod's field, else the account's, else true), and the reporter sends with it itself.
    user_account = job.spec.scheduling.service_account_name is not None
    sidecar = head and not user_account
    if sidecar:
        mounts.append({"name": STATUS_SPOOL_VOLUME, "mountPath": STATUS_SPOOL_PATH})
        env.append({"name": SPOOL_ENV, "value": STATUS_SPOOL_PATH})
        pod_volumes += [{"name": STATUS_SPOOL_VOLUME, "emptyDir": {"sizeLimit": "16Mi"}}, api_access_volume()]
    container = {
        "name": container_name,
        "image": image(job),
        "imagePullPolicy": job.spec.run_policy.image_pull_policy,
        "env": env,
        "resources": ray_resources(job),
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
    }
    spec: dict[str, Any] = {"serviceAccountName": pod_service_account(job)}
    if not (head and user_account):  # workers never need API credentials
        spec["automountServiceAccountToken"] = False
    spec |= {
        "containers": [container, reporter_sidecar(job, tools_image)] if sidecar else [container],  # the Ray container must be first
        "volumes": pod_volumes,
        "securityContext": pod_security_context(job, gpus=True),
    }
    if head:  # the reporter first: a tools image that cannot be pulled shows before the downloads
        spec["initContainers"] = [reporter_install_container(tools_image)]
        if not job.spec.data_prep.skip:
            spec["initContainers"].append(prepare_container(job))
    spec |= placement(job, gpus=True)
    return {"metadata": {"labels": labels(job, "ray-head" if head else "ray-worker")}, "spec": spec}


def placement(job: LoraRLJob, gpus: bool) -> dict[str, Any]:
    """Where the job's pods may run: the spec's node selector, tolerations, affinity and priority
    class; the profile's GPU node label only for pods that use GPUs."""
    hw = job.spec.hardware
    out: dict[str, Any] = {}
    profile_labels = profiles.profile_of(job).node_selector if gpus and hw.profile_node_selector else {}
    node_selector = {**profile_labels, **hw.node_selector}
    if node_selector:
        out["nodeSelector"] = dict(sorted(node_selector.items()))
    if hw.tolerations:
        out["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in hw.tolerations]
    if hw.affinity:
        out["affinity"] = hw.affinity
    if job.spec.scheduling.priority_class_name:
        out["priorityClassName"] = job.spec.scheduling.priority_class_name
    return out


# KubeRay v1.5.0's own submitter container (controllers/ray/common/job.go:216-232,
# GetDefaultSubmitterContainer): the head's image, these requests and limits.
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}


def submitter_pod_template(job: LoraRLJob) -> dict[str, Any]:
    """The pod that runs `ray job submit` (K8sJobMode). Rendered so that it holds no API token
    (KubeRay's default template runs as the namespace's `default` account with automount on) and
    asks for no GPU. No command: KubeRay sets `ray job submit ...` when the container has none
    (rayjob_controller.go:575-586, configureSubmitterContainer)."""
    container = {
        "name": SUBMITTER_CONTAINER,
        "image": image(job),
        "imagePullPolicy": job.spec.run_policy.image_pull_policy,
        "resources": SUBMITTER_RESOURCES,
        "securityContext": container_security_context(),
    }
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "containers": [container],
        # a Job's pods must not restart in place; KubeRay's default template says the same (job.go:211)
        "restartPolicy": "Never",
        "securityContext": pod_security_context(job, gpus=False),
    }
    spec |= placement(job, gpus=False)
    return {"metadata": {"labels": labels(job, "submitter")}, "spec": spec}


# Ray's token authentication: KubeRay (>= v1.5.1) creates a Secret named after the RayCluster
# with a random token (raycluster_controller.go:361-411, reconcileAuthSecret) and gives it as
# RAY_AUTH_TOKEN, with RAY_AUTH_MODE=token, to the Ray containers, the workers' wait-gcs-ready
# init container and the submitter (common/pod.go:249-280, rayjob_controller.go:604-606); its own
# dashboard client sends it (utils/util.go:922-975, GetRayDashboardClientFunc). Ray (>= 2.52) then refuses a dashboard or job
# API request without it: 401, or 403 with a wrong one (ray 2.55.1
# _private/authentication/http_token_authentication.py:28-80), and GCS calls likewise.
RAY_AUTH = {"mode": "token"}
# KubeRay refuses token mode without a rayVersion >= 2.52.0 and reads it for nothing else the
# render uses (utils/validation.go:194-208; common/job.go:168 only with metadata). The Ray of the
# job image (hack/images/job/requirements.txt); an image with Ray < 2.52 ignores RAY_AUTH_MODE
# and its head stays open (docs/security.md).
RAY_VERSION = "2.55.1"


def ray_cluster_spec(job: LoraRLJob, tools_image: str) -> dict[str, Any]:
    # num-gpus is explicit: KubeRay only infers it from limits keys ending in "gpu", which
    # partitioned AMD resources (amd.com/cpx_nps4, ...) do not.
    gpus = str(profiles.gpus_per_node(job))
    spec: dict[str, Any] = {
        "rayVersion": RAY_VERSION,
        "authOptions": dict(RAY_AUTH),
        "enableInTreeAutoscaling": False,
        "headGroupSpec": {
            # A fixed runtime-env-agent port: left at 0 the agent picks one and the head's Ray
            # client server asks the GCS for it for at most 30 s, then exits and takes the head
            # down (ray 2.55.1 util/client/server/proxier.py:146-159, _private/services.py:598-628);
            # a head short of CPU registers later than that and crash-looped on the real node.
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": gpus, "runtime-env-agent-port": RUNTIME_ENV_AGENT_PORT},
            "template": pod_template(job, "ray-head", head=True, tools_image=tools_image),
        },
    }
    workers = job.spec.hardware.nodes - 1
    if workers:
        spec["workerGroupSpecs"] = [
            {
                "groupName": WORKER_GROUP,
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": {"num-gpus": gpus},
                "template": pod_template(job, "ray-worker", head=False, tools_image=tools_image),
            }
        ]
    return spec


def runtime_env_yaml(job: LoraRLJob) -> str:
    """The launcher's runtime env. MASTER_ADDR/no_proxy come from the pod env (the pod IP is not
    known at render time). ${PYTHONPATH} is expanded by KubeRay's submitter bash (it quotes the
    JSON with Go's strconv.Quote), to the submitter's value: the head's image, so the image's
    PYTHONPATH (tests/api/test_quoting_chain.py)."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "NCCL_NVLS_ENABLE": "0",
        "PYTHONPATH": f"{command.MILES_ROOT}:{command.MEGATRON_ROOT}:${{PYTHONPATH}}",
    }
    return yaml.safe_dump({"env_vars": env}, sort_keys=False)


def rayjob(job: LoraRLJob, tools_image: str = DEFAULT_SETTINGS.tools_image) -> dict[str, Any]:
    run = job.spec.run_policy
    queue = job.spec.scheduling.queue_name
    extra_labels = {KUEUE_QUEUE_LABEL: queue} if queue else {}
    if job.spec.scheduling.workload_priority_class_name:
        extra_labels[KUEUE_PRIORITY_LABEL] = job.spec.scheduling.workload_priority_class_name
    return {
        "apiVersion": RAYJOB_API_VERSION,
        "kind": "RayJob",
        "metadata": metadata(job, rayjob_name(job), "rayjob", extra_labels),
        "spec": {
            "entrypoint": command.entrypoint(job),
            "runtimeEnvYAML": runtime_env_yaml(job),
            "submissionMode": "K8sJobMode",
            # Required by suspend and Kueue; with it KubeRay deletes the RayCluster (every pod that
            # holds a GPU) ttlSecondsAfterFinished after the RayJob's end, and keeps the submitter
            # Job, whose pod's log `lorarl logs` reads (KubeRay v1.5.1 rayjob_controller.go
            # 1311-1354, handleShutdownAfterJobFinishes; its end comes only once the submitter has
            # finished, 319-324, so the log is whole). Default 0: the GPUs are free at the run's
            # end; runPolicy.holdGpusAfterFinishSeconds keeps them, at their cost.
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": run.hold_gpus_seconds(),
            # Ends runs stuck in Initializing (image pulls, crash-looping head) too.
            "activeDeadlineSeconds": run.active_deadline_seconds,
            "backoffLimit": run.backoff_limit,
            "submitterConfig": {"backoffLimit": run.submitter_backoff_limit},
            "submitterPodTemplate": submitter_pod_template(job),
            # Kueue admits a queued job by flipping suspend to false; the controller decides
            # who writes this field (lorarl.control.queueing.rayjob_apply).
            "suspend": bool(job.spec.suspend or queue),
            "rayClusterSpec": ray_cluster_spec(job, tools_image),
        },
    }


@dataclass(frozen=True)
class Children:
    """The children of a job: the RayJob by name, and what it needs applied before it (it
    mounts the ConfigMap and the PVC and runs as the ServiceAccount)."""

    before_rayjob: tuple[dict[str, Any], ...]
    rayjob: dict[str, Any]

    def in_apply_order(self) -> list[dict[str, Any]]:
        return [*self.before_rayjob, self.rayjob]


def children(job: LoraRLJob, settings: RenderSettings = DEFAULT_SETTINGS) -> Children:
    before = [] if job.spec.scheduling.service_account_name else [service_account(job)]
    before += [reporter_role(job), reporter_role_binding(job), configmap(job)]
    pvc = persistent_volume_claim(job)
    if pvc is not None:
        before.append(pvc)
    if settings.network_policy.enabled:  # in place before the RayJob's pods start
        before.append(network_policy(job, settings.network_policy))
    return Children(tuple(before), rayjob(job, settings.tools_image))


def render(job: LoraRLJob, settings: RenderSettings = DEFAULT_SETTINGS) -> list[dict[str, Any]]:
    """All children of ``job`` in apply order."""
    return children(job, settings).in_apply_order()


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (scripts, runtimeEnvYAML) as readable literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_representer)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML, stable byte for byte."""
    return yaml.dump_all(objects, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False, width=1 << 16)
