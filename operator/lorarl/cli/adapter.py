"""``lorarl adapter pull`` (a user's) and ``lorarl adapter export`` (what the export pod runs)."""

from __future__ import annotations

import datetime
import json
import sys

import click

from .. import follow
from ..api import types as api


@click.group()
def adapter() -> None:
    """The trained adapter: pull it back verified (docs/adapters.md)."""


@adapter.command()
@click.argument("source")
@click.argument("directory", type=click.Path(file_okay=False))
@follow.namespace_option
@click.option("--digest", default=None, help="The manifest's expected sha256:<hex> (default, for a job: its status.adapter.digest).")
@click.option(
    "--endpoint", default=None, help="S3-compatible endpoint for an s3:// URI [default: $AWS_ENDPOINT_URL], Hub endpoint for hf:// [default: $HF_ENDPOINT]."
)
@click.option("--plain-http", is_flag=True, help="Reach an oci:// registry over HTTP, not HTTPS (as oras --plain-http).")
def pull(source: str, directory: str, namespace: str | None, digest: str | None, endpoint: str | None, plain_http: bool) -> None:
    """Fetch an adapter into DIRECTORY and verify every file's sha256. SOURCE: a job name (its
    status.adapter.uri) or a URI (s3://bucket/prefix/, oci://registry/repository:tag,
    hf://org/name@commit or a directory). Credentials for s3 come from the environment
    (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) as for the AWS CLI, for oci from the docker config
    (~/.docker/config.json) as oras reads it, for hf from HF_TOKEN as huggingface_hub reads it."""
    from ..adapter import pull as puller
    from ..adapter import stores

    uri = source
    if "://" not in source and "/" not in source:
        kube, namespace = follow._connect(namespace)
        body = follow._get(kube, namespace, source)
        if body is None:
            raise click.ClickException(f"{api.KIND} {namespace}/{source} not found")
        status = (body.get("status") or {}).get("adapter") or {}
        if not status.get("uri"):
            exported = follow.condition(body, "AdapterExported")
            why = f": {exported.get('reason')}: {exported.get('message', '')}" if exported else " (no spec.export?)"
            raise click.ClickException(f"{api.KIND} {namespace}/{source} has no exported adapter{why}")
        if not str(status["uri"]).startswith(("s3://", "oci://", "hf://")):
            raise click.ClickException(f"{status['uri']}: pulling from a claim is not built; mount the claim or use an s3, oci or hub destination")
        uri, digest = status["uri"], digest or status.get("digest")
    try:
        manifest = puller.pull(stores.for_uri(uri, endpoint, plain_http), directory, digest)
    except (stores.StoreError, puller.VerifyError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"{directory}: {len(manifest['files'])} files verified, rollout {manifest.get('rollout')}, base model {manifest['baseModel']['name']}")


@adapter.command(hidden=True)
@click.option("--plan", "plan_file", required=True, type=click.File("r"), help="The export plan (JSON, lorarl.job.export_plan).")
@click.option("--status", "status_file", type=click.File("r"), default=None, help="The job's status (JSON), for the metrics at the exported rollout.")
@click.option("--save-root", required=True, help="The job's checkpoint directory (read-only mount).")
@click.option("--termination-log", default="/dev/termination-log", show_default=True)
def export(plan_file, status_file, save_root: str, termination_log: str) -> None:
    """Export the newest complete save (the export pod's command)."""
    from ..adapter import export as exporter

    plan = json.load(plan_file)
    status = json.load(status_file) if status_file else {}
    report = exporter.run(plan, status, save_root, datetime.datetime.now(datetime.UTC))
    line = exporter.termination_message(report)
    try:
        with open(termination_log, "w", encoding="utf-8") as f:
            f.write(line)
    except OSError:
        pass
    click.echo(line)
    sys.exit(0 if report["ok"] else 1)
