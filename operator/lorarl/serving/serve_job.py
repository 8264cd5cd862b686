"""The load child (spec.serve): a ConfigMap holding the loader (lorarl/serving/loader.py) and a Job
whose one pod asks the SGLang server to load the exported adapter (docs/adapters.md). Pure: the
LoraRLJob with its status.adapter in, objects out. The API key reaches the pod from its Secret as
an environment variable (secretKeyRef), never in the spec, the command line or the status."""

from __future__ import annotations

import functools
import importlib.resources
from typing import Any

from ..adapter import egress
from ..api.types import LoraRLJob
from ..job import render
from ..job.settings import DEFAULT as DEFAULT_SETTINGS
from ..job.settings import RenderSettings
from . import loader

LOADER_DIR = "/opt/lorarl-serve"
LOADER_FILE = "loader.py"
EGRESS_FILE = "egress.py"  # the loader's neighbour in the ConfigMap (loader.py imports it)
CONTAINER = "load"
COMPONENT = "serve"  # the app.kubernetes.io/component label of the load's objects and pod


def name(job: LoraRLJob) -> str:
    return f"{job.metadata.name}-serve"


@functools.cache
def loader_source() -> str:
    return importlib.resources.files("lorarl").joinpath("serving", LOADER_FILE).read_text(encoding="utf-8")


@functools.cache
def egress_source() -> str:
    return importlib.resources.files("lorarl").joinpath("adapter", EGRESS_FILE).read_text(encoding="utf-8")


def adapter_name(job: LoraRLJob) -> str:
    assert job.spec.serve is not None
    return job.spec.serve.adapter_name or job.metadata.name


def exported_on_claim(job: LoraRLJob) -> tuple[str, str] | None:
    """(claim, directory in it) of the adapter on the export's first claim destination, from
    status.adapter's pvc://<claim>/<path><ns>/<job>/rollout-N/ URI; None while it names none."""
    claims = [d.claim.claim_name for d in (job.spec.export.destinations if job.spec.export else []) if d.claim is not None]
    adapter = (job.status or {}).get("adapter") or {}
    uris = adapter.get("uris") or [adapter.get("uri")]
    if not claims:
        return None
    prefix = f"pvc://{claims[0]}/"
    rel = next((u[len(prefix) :] for u in uris if isinstance(u, str) and u.startswith(prefix)), None)
    return (claims[0], rel.strip("/")) if rel else None


def adapter_path(job: LoraRLJob) -> str | None:
    """The adapter directory as the server sees it: spec.serve.adapterPath, or the export's claim
    directory under spec.serve.claimMountPath. None while status.adapter does not name it."""
    serve = job.spec.serve
    assert serve is not None
    if serve.adapter_path:
        return serve.adapter_path
    on_claim = exported_on_claim(job)
    if on_claim is None or serve.claim_mount_path is None:
        return None
    return f"{serve.claim_mount_path.rstrip('/')}/{on_claim[1]}"


def configmap(job: LoraRLJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": render.metadata(job, name(job), COMPONENT),
        "data": {LOADER_FILE: loader_source(), EGRESS_FILE: egress_source()},
    }


def job_object(job: LoraRLJob, path: str, settings: RenderSettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    serve = job.spec.serve
    assert serve is not None
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}, *render.egress_env(settings.egress)]
    if serve.api_key_secret_ref is not None:
        ref = serve.api_key_secret_ref
        env.append({"name": loader.KEY_ENV, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    command = ["python3", f"{LOADER_DIR}/{LOADER_FILE}", "--url", serve.url, "--name", adapter_name(job), "--path", path]
    if serve.replace:
        command.append("--replace")
    container = {
        "name": CONTAINER,
        "image": serve.image or (job.spec.export.image if job.spec.export else None) or settings.tools_image,
        "imagePullPolicy": job.spec.run_policy.image_pull_policy,
        "command": command,
        "env": env,
        "volumeMounts": [{"name": "loader", "mountPath": LOADER_DIR, "readOnly": True}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": render.container_security_context(),
        "terminationMessagePolicy": "File",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": render.metadata(job, name(job), COMPONENT),
        "spec": {
            "backoffLimit": serve.backoff_limit,
            # exit 2 is a refusal the server will repeat (loader.py): no retry; exit 1 (unreachable) retries
            "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": [loader.REFUSED]}}]},
            "template": {
                "metadata": {"labels": render.labels(job, COMPONENT)},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,  # the pod reports through its termination message
                    "securityContext": render.pod_security_context(job, gpus=False),
                    "containers": [container],
                    "volumes": [{"name": "loader", "configMap": {"name": name(job)}}],
                },
            },
        },
    }


def egress_policy(job: LoraRLJob, settings: RenderSettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """The load pod reaches spec.serve.url's host and port (and DNS), nothing else."""
    assert job.spec.serve is not None
    target = egress.url_host_port(job.spec.serve.url)
    return render.egress_policy(job, COMPONENT, [target] if target else [], settings.egress)


def children(job: LoraRLJob, settings: RenderSettings = DEFAULT_SETTINGS) -> list[dict[str, Any]]:
    """The load's objects, or none without spec.serve or before the adapter's path is known:
    its egress policy first (in place before the pod starts), unless turned off."""
    if job.spec.serve is None:
        return []
    path = adapter_path(job)
    if path is None:
        return []
    policy = [egress_policy(job, settings)] if settings.network_policy.enabled and settings.network_policy.egress else []
    return [*policy, configmap(job), job_object(job, path, settings)]
