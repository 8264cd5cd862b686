"""``lorarl serve manifest``: an SGLang server workload that starts with a job's exported adapter."""

from __future__ import annotations

import click

from .. import follow
from ..api import types as api


@click.group()
def serve() -> None:
    """Serving the trained adapter (docs/adapters.md)."""


@serve.command()
@click.argument("job_name", required=False)
@click.option("-f", "--filename", type=click.File("r"), default=None, help="A LoraRLJob with its status (YAML/JSON) instead of reading JOB from the cluster.")
@follow.namespace_option
@click.option("--image", required=True, help="The SGLang server image (e.g. an SGLang ROCm image).")
@click.option("--name", "adapter_name", default=None, help="The adapter's lora_name [default: the job's name].")
@click.option("--mount-path", default="/adapters", show_default=True, help="Where the server mounts the export's claim.")
@click.option("--api-key-secret", default=None, metavar="SECRET:KEY", help="The Secret key holding the server's --api-key (never the key itself).")
@click.option("--max-loras-per-batch", type=click.IntRange(1, 64), default=8, show_default=True)
def manifest(job_name, filename, namespace, image, adapter_name, mount_path, api_key_secret, max_loras_per_batch) -> None:
    """Print a Deployment and a Service running SGLang with the job's exported adapter loaded at
    start (--enable-lora --lora-paths NAME=PATH --max-lora-rank R), mounting the export's claim."""
    import yaml

    from ..serving import workload

    if filename is not None:
        body = yaml.safe_load(filename)
    elif job_name:
        kube, namespace = follow._connect(namespace)
        body = follow._get(kube, namespace, job_name)
        if body is None:
            raise click.ClickException(f"{api.KIND} {namespace}/{job_name} not found")
    else:
        raise click.UsageError("give JOB or -f FILE")
    key = None
    if api_key_secret:
        secret, _, key_name = api_key_secret.partition(":")
        try:
            key = api.SecretKeyRef(name=secret, key=key_name)
        except ValueError:
            raise click.BadParameter("SECRET:KEY, a Secret's name and one of its keys", param_hint="--api-key-secret") from None
    try:
        job = api.LoraRLJob.model_validate(body)
        objects = workload.manifests(job, image, adapter_name, mount_path, key, max_loras_per_batch)
    except ValueError as err:  # pydantic's ValidationError and NotExported are ValueErrors
        raise click.ClickException(str(err).splitlines()[0]) from None
    click.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
