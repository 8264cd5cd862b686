"""An SGLang server workload that starts with the exported adapter: a Deployment and a Service.
Pure: the LoraRLJob (with its status.adapter on a claim destination) in, objects out; printed by
``lorarl serve manifest JOB`` for the user to review and apply (the operator does not run it).

The flags are SGLang's (0.5.23, python/sglang/srt/arg_groups/fields/lora.py:34-69):
``--enable-lora --lora-paths NAME=PATH`` (parsed as arg_groups/lora_hook.py:75-112),
``--max-lora-rank`` = spec.lora.rank, ``--lora-target-modules`` = the HF projections the export
carries (lorarl.job.export_plan), ``--api-key $(SGLANG_API_KEY)`` expanded by the kubelet from the
Secret, so the manifest holds only the reference."""

from __future__ import annotations

from typing import Any

from ..api.types import LoraRLJob, SecretKeyRef
from ..job import export_plan
from . import serve_job

PORT = 30000


class NotExported(ValueError):
    """The job's status.adapter names no directory on a claim destination: nothing to mount."""


def args(job: LoraRLJob, name: str, path: str, api_key: bool, max_loras_per_batch: int) -> list[str]:
    out = ["--model-path", job.spec.model.name or "", "--host", "0.0.0.0", "--port", str(PORT)]  # noqa: S104 - the pod's address, behind the Service
    out += ["--enable-lora", "--lora-paths", f"{name}={path}", "--max-lora-rank", str(job.spec.lora.rank)]
    out += ["--lora-target-modules", *export_plan.hf_target_modules(list(job.spec.lora.target_modules))]
    out += ["--max-loras-per-batch", str(max_loras_per_batch)]
    if api_key:
        out += ["--api-key", "$(SGLANG_API_KEY)"]
    return out


def manifests(
    job: LoraRLJob,
    image: str,
    name: str | None = None,
    mount_path: str = "/adapters",
    api_key: SecretKeyRef | None = None,
    max_loras_per_batch: int = 8,
) -> list[dict[str, Any]]:
    on_claim = serve_job.exported_on_claim(job)
    if on_claim is None:
        raise NotExported(f"{job.metadata.name}: status.adapter names no directory on a claim destination of spec.export (AdapterExported must be True)")
    claim, rel = on_claim
    adapter = name or job.metadata.name
    app = f"sglang-{job.metadata.name}"
    labels = {"app.kubernetes.io/name": "sglang", "app.kubernetes.io/instance": app, "lorarl.dev/adapter-of": job.metadata.name}
    container: dict[str, Any] = {
        "name": "sglang",
        "image": image,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": args(job, adapter, f"{mount_path.rstrip('/')}/{rel}", api_key is not None, max_loras_per_batch),
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 10},
        "volumeMounts": [{"name": "adapters", "mountPath": mount_path, "readOnly": True}],
    }
    if api_key is not None:
        container["env"] = [{"name": "SGLANG_API_KEY", "valueFrom": {"secretKeyRef": {"name": api_key.name, "key": api_key.key}}}]
    meta = {"name": app, "namespace": job.metadata.namespace, "labels": labels}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": app}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": "adapters", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"selector": {"app.kubernetes.io/instance": app}, "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]},
    }
    return [deployment, service]
