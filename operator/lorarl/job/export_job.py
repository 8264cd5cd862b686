"""The export child: a ConfigMap (the exporter zipapp, the plan, the status it was taken from)
and a Job whose one pod mounts the job's claim read-only and runs the exporter
(docs/adapters.md). Pure: the LoraRLJob (and its status) in, objects out."""

from __future__ import annotations

import base64
import json
from typing import Any

from ..adapter import egress, export
from ..api.types import LoraRLJob
from . import artifact, export_plan, paths, render
from .settings import DEFAULT as DEFAULT_SETTINGS
from .settings import RenderSettings

EXPORT_DIR = "/opt/lorarl-export"
EXPORTER_FILE = "exporter.pyz"
CONTAINER = "export"
COMPONENT = "export"  # the app.kubernetes.io/component label of the export's objects and pod


ROLLOUT_LABEL = render.EXPORT_ROLLOUT_LABEL


def name(job: LoraRLJob, rollout: int | None = None) -> str:
    """``<job>-export`` (after Succeeded), ``<job>-export-r<NNNNNNN>`` (at the save of a rollout)."""
    return f"{job.metadata.name}-export" if rollout is None else f"{job.metadata.name}-export-r{rollout:07d}"


def _metadata(job: LoraRLJob, rollout: int | None) -> dict[str, Any]:
    return render.metadata(job, name(job, rollout), COMPONENT, {ROLLOUT_LABEL: str(rollout)} if rollout is not None else None)


def _status_for_export(status: dict[str, Any] | None) -> dict[str, Any]:
    """Only what the manifest takes (the curves of status.history): the ConfigMap stays small."""
    history = (status or {}).get("history") or {}
    return {"history": {k: history[k] for k in ("reward", "eval") if k in history}}


def configmap(job: LoraRLJob, rollout: int | None = None) -> dict[str, Any]:
    plan = export_plan.export_plan(job)
    if rollout is not None:
        plan["rollout"] = rollout  # that save, not the newest (a newer one may be being written)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(job, rollout),
        "data": {"plan.json": json.dumps(plan, sort_keys=True), "status.json": json.dumps(_status_for_export(job.status), sort_keys=True)},
        "binaryData": {EXPORTER_FILE: base64.b64encode(artifact.exporter_zipapp()).decode("ascii")},
    }


def _env(job: LoraRLJob, settings: RenderSettings = DEFAULT_SETTINGS) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}, *render.egress_env(settings.egress)]
    assert job.spec.export is not None
    for i, dest in enumerate(job.spec.export.destinations):
        if dest.s3 is not None and dest.s3.credentials_secret_name:
            key_var, secret_var = export.credential_env(i)
            secret = dest.s3.credentials_secret_name
            env += [
                {"name": key_var, "valueFrom": {"secretKeyRef": {"name": secret, "key": "AWS_ACCESS_KEY_ID"}}},
                {"name": secret_var, "valueFrom": {"secretKeyRef": {"name": secret, "key": "AWS_SECRET_ACCESS_KEY"}}},
            ]
        if dest.hub is not None:
            ref = dest.hub.token_secret_ref
            env.append({"name": export.hub_token_env(i), "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    if any(dest.hub is not None for dest in job.spec.export.destinations):
        # huggingface_hub reads these at import. Xet off: the client then uploads through the LFS
        # batch API, the protocol the Hub stand-in serves and the tests exercise (with hf_xet,
        # which the image has, it would use Xet storage, not tested here); no telemetry, no
        # progress bars in the pod's log; its cache under /tmp (the root may be read-only).
        env += [
            {"name": "HF_HUB_DISABLE_XET", "value": "1"},
            {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
            {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},
            {"name": "HF_HOME", "value": "/tmp/lorarl-hf"},
        ]
    return env


def _security_context(job: LoraRLJob) -> dict[str, Any]:
    """The export reads the claim as the job's pods wrote it. With spec.runPolicy.runAsUser, as
    that user (the pod's securityContext). Without, the job's pods ran as their image's user, root
    in the miles images, and the volume's root directory is often root's alone (the hostpath
    provisioner makes it 0750), as is /root where it is mounted (0700 in Debian): the export image
    may have another default user (the operator's is 65532), so the export runs as uid 0 too, with
    no capability (so no DAC override either)."""
    ctx = render.container_security_context()
    if job.spec.run_policy.run_as_user is None:
        ctx["runAsUser"] = 0
    return ctx


def job_object(job: LoraRLJob, settings: RenderSettings = DEFAULT_SETTINGS, rollout: int | None = None) -> dict[str, Any]:
    export_spec = job.spec.export
    assert export_spec is not None
    volumes: list[dict[str, Any]] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": render.claim_name(job), "readOnly": True}},
        {"name": "exporter", "configMap": {"name": name(job, rollout)}},
    ]
    mounts: list[dict[str, Any]] = [
        # where the training pods mount it: the attempts' ledger records absolute save directories
        {"name": "data", "mountPath": paths.SHARED_DIR, "subPath": "shared_data", "readOnly": True},
        {"name": "exporter", "mountPath": EXPORT_DIR, "readOnly": True},
    ]
    for i, dest in enumerate(export_spec.destinations):
        if dest.claim is not None:
            volumes.append({"name": f"dest-{i}", "persistentVolumeClaim": {"claimName": dest.claim.claim_name}})
            mounts.append({"name": f"dest-{i}", "mountPath": f"{export.CLAIM_MOUNT_ROOT}/{i}"})
        if dest.oci is not None and dest.oci.credentials_secret_name:
            # the docker config as a file (oras reads it as docker does), never in the environment
            items = [{"key": ".dockerconfigjson", "path": "config.json"}]
            volumes.append({"name": f"auth-{i}", "secret": {"secretName": dest.oci.credentials_secret_name, "items": items}})
            mounts.append({"name": f"auth-{i}", "mountPath": f"{export.AUTH_MOUNT_ROOT}/{i}", "readOnly": True})
    command = [
        "python3",
        f"{EXPORT_DIR}/{EXPORTER_FILE}",
        "--plan",
        f"{EXPORT_DIR}/plan.json",
        "--status",
        f"{EXPORT_DIR}/status.json",
        "--save-root",
        paths.save_dir(job),
    ]
    container = {
        "name": CONTAINER,
        # the operator's tools image has python3, botocore (s3), oras (oci) and huggingface_hub (hub): every destination
        # works without a choice of image (a training image has neither library)
        "image": export_spec.image or settings.tools_image,
        "imagePullPolicy": job.spec.run_policy.image_pull_policy,
        "command": command,
        "env": _env(job, settings),
        "volumeMounts": mounts,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": _security_context(job),
        "terminationMessagePolicy": "File",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(job, rollout),
        "spec": {
            "backoffLimit": export_spec.backoff_limit,
            "template": {
                "metadata": {"labels": _metadata(job, rollout)["labels"]},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,  # the pod reports through its termination message
                    "securityContext": render.pod_security_context(job, gpus=False),
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def targets(job: LoraRLJob) -> list[tuple[str, int]]:
    """The (host, port) the export pod connects to: its destinations' (egress.destination_hosts)."""
    assert job.spec.export is not None
    return [hp for d in job.spec.export.destinations for hp in egress.destination_hosts(d.model_dump(by_alias=True, exclude_none=True))]


def egress_policy(job: LoraRLJob, settings: RenderSettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """One for every export Job of the job (after Succeeded and at each save): their pods share the component label."""
    return render.egress_policy(job, COMPONENT, targets(job), settings.egress)


def children(job: LoraRLJob, settings: RenderSettings = DEFAULT_SETTINGS, rollout: int | None = None) -> list[dict[str, Any]]:
    """The export's objects (of the save of ``rollout``, or after Succeeded), or none without
    spec.export: its egress policy first (in place before the pod starts), unless turned off."""
    if job.spec.export is None:
        return []
    policy = [egress_policy(job, settings)] if settings.network_policy.enabled and settings.network_policy.egress else []
    return [*policy, configmap(job, rollout), job_object(job, settings, rollout)]
