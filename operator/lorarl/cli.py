"""The ``lorarl`` command line: render, validate, crd (offline) and run (the operator).

Development commands (the embedded control plane, the demo, docs generation) live in the
separate ``lorarl-dev`` tool (hack/devtools), which the runtime package does not ship."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, TextIO

import click
import yaml

from . import __version__, curves
from .api import types as api
from .control.options import DEFAULT_FINISHED_METRICS_SECONDS, DEFAULT_RESYNC_SECONDS, DEFAULT_WORKERS, Options


def _documents(stream: TextIO, source: str) -> Iterator[tuple[str, Any]]:
    try:
        for i, doc in enumerate(yaml.safe_load_all(stream)):
            if doc is not None:
                yield f"{source}#{i + 1}", doc
    except yaml.YAMLError as err:
        raise click.ClickException(f"{source}: not valid YAML: {err}") from err


def _jobs(stream: TextIO, source: str) -> Iterator[tuple[str, Any]]:
    """LoraRLJob documents of a file (other kinds, e.g. a Secret beside it, are skipped)."""
    found = False
    for where, doc in _documents(stream, source):
        if isinstance(doc, dict) and doc.get("kind") not in (None, api.KIND):
            continue
        found = True
        yield where, doc
    if not found:
        raise click.ClickException(f"{source}: no {api.KIND} document found")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lorarl")
def main() -> None:
    """LoRA RL post-training on Kubernetes: LoraRLJob -> KubeRay RayJob."""


@main.command()
@click.option("-f", "--filename", "file", type=click.File("r"), required=True, help="LoraRLJob YAML ('-' for stdin).")
@click.option("-n", "--namespace", default=None, help="Namespace to render into when the file names none.")
def render(file: TextIO, namespace: str | None) -> None:
    """Print the child objects of a LoraRLJob as multi-document YAML (offline)."""
    from .admission.validation import validate
    from .job.render import render as render_children
    from .job.render import to_yaml

    objects: list[dict] = []
    failed = False
    for where, doc in _jobs(file, file.name):
        if namespace and isinstance(doc, dict) and isinstance(doc.setdefault("metadata", {}), dict):
            doc["metadata"].setdefault("namespace", namespace)
        job, problems = validate(doc)
        if problems:
            failed = True
            for p in problems:
                click.echo(f"{where}: {p}", err=True)
            continue
        objects += render_children(job)
    if failed:
        sys.exit(1)
    click.echo(to_yaml(objects), nl=False)


@main.command()
@click.option("-f", "--filename", "file", type=click.File("r"), required=True, help="LoraRLJob YAML ('-' for stdin).")
def validate(file: TextIO) -> None:
    """Check a LoraRLJob: schema, the CRD's CEL rules and semantic checks."""
    from .admission.validation import validate as validate_doc

    failed = False
    for where, doc in _jobs(file, file.name):
        _, problems = validate_doc(doc)
        metadata = doc.get("metadata") if isinstance(doc, dict) else None
        name = metadata.get("name", "?") if isinstance(metadata, dict) else "?"
        if problems:
            failed = True
            for p in problems:
                click.echo(f"{where} ({name}): {p}", err=True)
        else:
            click.echo(f"{where} ({name}): valid")
    sys.exit(1 if failed else 0)


@main.command()
def crd() -> None:
    """Print the LoraRLJob CustomResourceDefinition."""
    from .admission.crdgen import crd_yaml

    click.echo(crd_yaml(), nl=False)


@main.command()
@click.option("-n", "--namespace", "namespaces", multiple=True, help="Watch these namespaces (repeatable; globs allowed).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch the whole cluster.")
@click.option(
    "--liveness",
    default="http://0.0.0.0:8080/healthz",
    show_default=True,
    help="Liveness endpoint; /readyz on the same port is the readiness endpoint ('' disables both).",
)
@click.option("--metrics-port", default=9090, show_default=True, type=int, help="Prometheus metrics port (0 to disable).")
@click.option("--metrics-address", default="0.0.0.0", show_default=True, help="Address the metrics endpoint listens on (127.0.0.1: this host only).")
@click.option(
    "--resync-seconds",
    default=DEFAULT_RESYNC_SECONDS,
    show_default=True,
    type=float,
    help="Period of the resync: every unfinished job is reconciled from the cache (nothing is written unless something changed).",
)
@click.option(
    "--finished-metrics-seconds",
    default=DEFAULT_FINISHED_METRICS_SECONDS,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds a finished job's per-job series stay on /metrics after its completionTime (docs/observability.md).",
)
@click.option("--workers", default=DEFAULT_WORKERS, show_default=True, type=click.IntRange(1, 128), help="Reconcile worker threads (API requests in flight).")
@click.option("--log-format", type=click.Choice(["json", "plain", "full"]), default="json", show_default=True)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.option("--leader-elect", is_flag=True, help="Run only while holding a coordination.k8s.io Lease (for 2+ replicas).")
@click.option("--leader-election-namespace", default=None, help="Namespace of the Lease [default: $POD_NAMESPACE].")
@click.option("--leader-election-id", default="lorarl-operator", show_default=True, help="Name of the Lease.")
@click.option("--lease-duration", default=15.0, show_default=True, type=float, help="Seconds a standby waits, after the lease last changed, before taking it.")
@click.option("--renew-deadline", default=10.0, show_default=True, type=float, help="Seconds the leader keeps trying to renew before it exits.")
@click.option("--retry-period", default=2.0, show_default=True, type=float, help="Seconds between renewals and between a standby's tries.")
def run(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    liveness: str,
    metrics_port: int,
    metrics_address: str,
    resync_seconds: float,
    finished_metrics_seconds: float,
    workers: int,
    log_format: str,
    verbose: bool,
    leader_elect: bool,
    leader_election_namespace: str | None,
    leader_election_id: str,
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
) -> None:
    """Run the operator (with --leader-elect: only while it holds the Lease)."""
    import os

    import kopf
    import kubernetes

    from . import controller
    from .runtime import leader, probes, runner
    from .runtime.kube import Api

    if not namespaces and not all_namespaces:
        raise click.UsageError("give --namespace NS (repeatable) or --all-namespaces")
    if liveness:
        try:
            probes.parse(liveness)
        except ValueError as err:
            raise click.UsageError(str(err)) from None
    election = None
    if leader_elect:
        timings = leader.Timings(lease_duration, renew_deadline, retry_period)
        if timings.problem():
            raise click.UsageError(str(timings.problem()))
        lease_namespace = leader_election_namespace or os.environ.get("POD_NAMESPACE")
        if not lease_namespace:
            raise click.UsageError("--leader-elect needs --leader-election-namespace NS (or $POD_NAMESPACE, e.g. from the downward API)")
        election = runner.Election(lease_namespace, leader_election_id, leader.new_identity(), timings)
    fmt = getattr(kopf.LogFormat, log_format.upper())
    # the "[namespace/name]" prefix of kopf's object formatter on text lines; JSON lines carry
    # the same reference as an "object" key instead
    kopf.configure(verbose=verbose, log_format=fmt, log_prefix=fmt is not kopf.LogFormat.JSON, log_refkey="object")
    try:
        kube = Api.from_environment(connections=controller.api_connections(workers))
    except kubernetes.config.ConfigException as err:
        raise click.ClickException(f"no Kubernetes configuration (in-cluster, $KUBECONFIG or ~/.kube/config): {err}") from None
    options = Options(
        namespaces=() if all_namespaces else tuple(namespaces),
        workers=workers,
        resync_seconds=resync_seconds,
        finished_metrics_seconds=finished_metrics_seconds,
    )
    runner.run(
        register=lambda registry, settings: controller.Controller(kube, options, settings).register(registry),
        namespaces=list(options.namespaces),
        clusterwide=all_namespaces,
        liveness=liveness or None,
        metrics_port=metrics_port or None,
        metrics_address=metrics_address,
        kube=kube,
        election=election,
    )


main.add_command(curves.plot), main.add_command(curves.watch)  # lorarl plot / watch (curves.py)

if __name__ == "__main__":  # pragma: no cover
    main()
