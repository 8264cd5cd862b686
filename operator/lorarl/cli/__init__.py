"""The ``lorarl`` command line: render, validate, crd (offline), run (the operator), and logs,
status, wait (following one job: ``follow.py``); each command parses its options and hands over
to the module that does the work.

Development commands (the embedded control plane, the demo, docs generation) live in the
separate ``lorarl-dev`` tool (hack/devtools), which the runtime package does not ship."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import click

from .. import __version__, curves, follow
from ..adapter import egress
from ..api import types as api
from ..control.options import DEFAULT_FINISHED_METRICS_SECONDS, DEFAULT_REPAIR_SECONDS, DEFAULT_RESYNC_SECONDS, DEFAULT_WORKERS, Options
from ..job.settings import DEFAULT_KUBERAY_POD_LABELS, DEFAULT_TOOLS_IMAGE, EgressSettings, NetworkPolicySettings, RenderSettings, format_labels, parse_labels
from . import adapter as adapter_cli
from . import serve as serve_cli

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a namespace's name


def _jobs(paths: tuple[str, ...], recursive: bool) -> Iterator[tuple[str, Any]]:
    """LoraRLJob documents of the files -f/-R name, read as kubectl reads them (other kinds,
    e.g. a Secret beside a job, are skipped); a repeated key is a warning, as kubectl keeps the
    last value."""
    from ..admission import manifests

    found = False
    try:
        for doc in manifests.read(list(paths), recursive, sys.stdin):
            for warning in doc.warnings:
                click.echo(f"{doc.where}: warning: {warning}", err=True)
            if isinstance(doc.body, dict) and doc.body.get("kind") not in (None, api.KIND):
                continue
            found = True
            yield doc.where, doc.body
    except manifests.ManifestError as err:
        raise click.ClickException(str(err)) from None
    if not found:
        raise click.ClickException(f"{', '.join(paths)}: no {api.KIND} document found")


def _name(doc: Any) -> str:
    metadata = doc.get("metadata") if isinstance(doc, dict) else None
    return str(metadata.get("name", "?")) if isinstance(metadata, dict) else "?"


FILENAME = click.option(
    "-f",
    "--filename",
    "paths",
    multiple=True,
    required=True,
    help="A LoraRLJob file, a directory of .json/.yaml/.yml files, or '-' for stdin (repeatable).",
)
RECURSIVE = click.option("-R", "--recursive", is_flag=True, help="Also read the subdirectories of a -f directory (as kubectl -R).")
TOOLS_IMAGE = click.option(
    "--tools-image",
    envvar="LORARL_TOOLS_IMAGE",
    default=DEFAULT_TOOLS_IMAGE,
    show_default=True,
    show_envvar=True,
    metavar="IMAGE",
    help="The operator's own image, for the Ray head's reporter init container and sidecar (the chart sets it to the operator's image).",
)


def _tools_image(value: str) -> str:
    if not value.strip() or any(c.isspace() for c in value):
        raise click.UsageError(f"--tools-image {value!r}: expected an image reference (no spaces)")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lorarl")
def main() -> None:
    """LoRA RL post-training on Kubernetes: LoraRLJob -> KubeRay RayJob."""


@main.command()
@FILENAME
@RECURSIVE
@click.option("-n", "--namespace", default=None, help="Namespace to render into when the file names none.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True, help="Multi-document YAML, or one JSON List.")
@click.option("--only", metavar="KIND|NAME", default=None, help="Print only the children of this kind (e.g. RayJob, configmap) or name.")
@click.option("--command", "train_command", is_flag=True, help="Print the train.py command instead, one flag per line.")
@TOOLS_IMAGE
def render(paths: tuple[str, ...], recursive: bool, namespace: str | None, output: str, only: str | None, train_command: bool, tools_image: str) -> None:
    """Print the child objects of a LoraRLJob (offline)."""
    from ..admission.validation import validate
    from ..job import view
    from ..job.render import render as render_children

    settings = RenderSettings(tools_image=_tools_image(tools_image))
    objects: list[dict] = []
    commands: list[str] = []
    failed = False
    for where, doc in _jobs(paths, recursive):
        if namespace and isinstance(doc, dict) and isinstance(doc.setdefault("metadata", {}), dict):
            doc["metadata"].setdefault("namespace", namespace)
        job, problems = validate(doc)
        if problems or job is None:
            failed = True
            for p in problems:
                click.echo(f"{where}: {p}", err=True)
            continue
        objects += render_children(job, settings)
        commands.append(view.command_lines(job))
    if failed:
        sys.exit(1)
    if train_command:
        click.echo("\n".join(commands), nl=False)
        return
    chosen = view.select(objects, only)
    if not chosen:
        kinds = ", ".join(dict.fromkeys(o["kind"] for o in objects))
        raise click.ClickException(f"--only {only}: no child of that kind or name (kinds: {kinds})")
    click.echo(view.show(chosen, output), nl=False)


@main.command()
@FILENAME
@RECURSIVE
def validate(paths: tuple[str, ...], recursive: bool) -> None:
    """Check LoraRLJobs as the API server would: schema, the CRD's CEL rules and semantic checks."""
    from ..admission.validation import validate as validate_doc

    failed = False
    for where, doc in _jobs(paths, recursive):
        _, problems = validate_doc(doc)
        if problems:
            failed = True
            for p in problems:
                click.echo(f"{where} ({_name(doc)}): {p}", err=True)
        else:
            click.echo(f"{where} ({_name(doc)}): valid")
        for warning in deprecations(doc):
            click.echo(f"{where} ({_name(doc)}): warning: {warning}", err=True)
    sys.exit(1 if failed else 0)


def deprecations(doc: Any) -> list[str]:
    """What a valid document says in a deprecated way (the API server takes it silently)."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    run = spec.get("runPolicy") if isinstance(spec, dict) else None
    if isinstance(run, dict) and "ttlSecondsAfterFinished" in run:
        return [
            "spec.runPolicy.ttlSecondsAfterFinished is deprecated: it is the old name of runPolicy.holdGpusAfterFinishSeconds, "
            "the seconds the finished RayCluster keeps its GPUs (default 0: released when the run ends); "
            "not spec.ttlSecondsAfterFinished, which deletes the LoraRLJob"
        ]
    return []


@main.command()
def crd() -> None:
    """Print the LoraRLJob CustomResourceDefinition."""
    from ..admission.crdgen import crd_yaml

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
    "--metrics-auth",
    type=click.Choice(["kubernetes", "none"]),
    default="kubernetes",
    show_default=True,
    help="kubernetes: /metrics answers only a bearer token that a TokenReview authenticates and a SubjectAccessReview allows to `get /metrics` "
    "(401 without one, 403 when not allowed; docs/security.md). none: plain metrics, for anyone who reaches the port.",
)
@click.option(
    "--resync-seconds",
    default=DEFAULT_RESYNC_SECONDS,
    show_default=True,
    type=float,
    help="Period of the resync: every unfinished job is reconciled from the cache (nothing is written unless something changed).",
)
@click.option(
    "--repair-seconds",
    default=DEFAULT_REPAIR_SECONDS,
    show_default=True,
    type=click.FloatRange(0),
    help="Every child of an unfinished job is applied again at most this often (at a resync), so that children deleted or edited by hand come back; 0: never.",
)
@click.option(
    "--finished-metrics-seconds",
    default=DEFAULT_FINISHED_METRICS_SECONDS,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds a finished job's per-job series stay on /metrics after its completionTime (docs/observability.md).",
)
@click.option(
    "--network-policy/--no-network-policy",
    default=True,
    show_default=True,
    help="Render each job's NetworkPolicy: its Ray pods admit only the job's own pods, and KubeRay's operator on the dashboard port (docs/security.md).",
)
@click.option(
    "--kuberay-operator-namespace-labels",
    default="",
    show_default=True,
    metavar="K=V,...",
    help="The labels of KubeRay's operator's namespace, for the NetworkPolicy ('': any namespace).",
)
@click.option(
    "--kuberay-operator-namespace",
    default="",
    show_default=True,
    metavar="NAME",
    help="The namespace of KubeRay's operator, for the NetworkPolicy: only its pods there reach a job's dashboard port ('': any namespace the labels match).",
)
@click.option(
    "--kuberay-operator-pod-labels",
    default=format_labels(DEFAULT_KUBERAY_POD_LABELS),
    show_default=True,
    metavar="K=V,...",
    help="The labels of KubeRay's operator's pods, for the NetworkPolicy ('': every pod of those namespaces).",
)
@click.option(
    "--egress-network-policy/--no-egress-network-policy",
    default=True,
    show_default=True,
    help="With --network-policy, also render the export and load Jobs' egress NetworkPolicies: DNS and their destinations' ports only (docs/security.md).",
)
@click.option(
    "--cluster-cidrs",
    default="",
    metavar="CIDR,...",
    help="The cluster's Service and pod CIDRs: the export and load pods refuse to connect there, their egress policies except them ('': none known).",
)
@click.option(
    "--allowed-internal-cidrs",
    default="",
    metavar="CIDR,...",
    help="Ranges of --cluster-cidrs the export and load pods may reach all the same (e.g. an in-cluster SGLang server's Service and pods).",
)
@TOOLS_IMAGE
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
    metrics_auth: str,
    resync_seconds: float,
    repair_seconds: float,
    finished_metrics_seconds: float,
    network_policy: bool,
    kuberay_operator_namespace_labels: str,
    kuberay_operator_namespace: str,
    kuberay_operator_pod_labels: str,
    egress_network_policy: bool,
    cluster_cidrs: str,
    allowed_internal_cidrs: str,
    tools_image: str,
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
    import dataclasses
    import os

    import kubernetes

    from .. import controller
    from ..reporter import text
    from ..runtime import leader, probes, runner
    from ..runtime.kube import Api

    if not namespaces and not all_namespaces:
        raise click.UsageError("give --namespace NS (repeatable) or --all-namespaces")
    if liveness:
        try:
            probes.parse(liveness)
        except ValueError as err:
            raise click.UsageError(str(err)) from None
    try:
        egress_settings = EgressSettings(*(tuple(str(n) for n in egress.parse_cidrs(text)) for text in (cluster_cidrs, allowed_internal_cidrs)))
    except ValueError as err:
        raise click.UsageError(f"--cluster-cidrs / --allowed-internal-cidrs: {err}") from None
    settings = RenderSettings(tools_image=_tools_image(tools_image), egress=egress_settings)
    try:
        policy = NetworkPolicySettings(
            network_policy,
            egress_network_policy,
            parse_labels(kuberay_operator_namespace_labels),
            parse_labels(kuberay_operator_pod_labels),
            kuberay_namespace=kuberay_operator_namespace,
        )
    except ValueError as err:
        raise click.UsageError(f"--kuberay-operator-*-labels: {err}") from None
    if kuberay_operator_namespace and not DNS_LABEL.fullmatch(kuberay_operator_namespace):
        raise click.UsageError(f"--kuberay-operator-namespace: {kuberay_operator_namespace!r} is not a namespace name (a DNS label)")
    election = None
    if leader_elect:
        timings = leader.Timings(lease_duration, renew_deadline, retry_period)
        if timings.problem():
            raise click.UsageError(str(timings.problem()))
        lease_namespace = leader_election_namespace or os.environ.get("POD_NAMESPACE")
        if not lease_namespace:
            raise click.UsageError("--leader-elect needs --leader-election-namespace NS (or $POD_NAMESPACE, e.g. from the downward API)")
        election = runner.Election(lease_namespace, leader_election_id, leader.new_identity(), timings)
    runner.configure_logging(verbose, log_format)
    text.install_log_filter()  # a job's text in a log line: printable, one line (lorarl.reporter.text)
    try:
        kube = Api.from_environment(connections=controller.api_connections(workers))
    except kubernetes.config.ConfigException as err:
        raise click.ClickException(f"no Kubernetes configuration (in-cluster, $KUBECONFIG or ~/.kube/config): {err}") from None
    options = Options(
        namespaces=() if all_namespaces else tuple(namespaces),
        workers=workers,
        resync_seconds=resync_seconds,
        repair_seconds=repair_seconds,
        finished_metrics_seconds=finished_metrics_seconds,
        render=dataclasses.replace(settings, network_policy=policy),
    )
    runner.run(
        build=lambda settings: controller.Controller(kube, options, settings),
        namespaces=list(options.namespaces),
        clusterwide=all_namespaces,
        liveness=liveness or None,
        metrics_port=metrics_port or None,
        metrics_address=metrics_address,
        metrics_authenticated=metrics_auth == "kubernetes",
        kube=kube,
        election=election,
    )


# following one job (logs, status, wait): their own module
for _command in (follow.logs, follow.status, follow.wait):
    main.add_command(_command)

main.add_command(curves.plot)  # lorarl plot (curves.py)
main.add_command(curves.watch)  # lorarl watch (curves.py)
main.add_command(adapter_cli.adapter)  # lorarl adapter pull (cli/adapter.py)
main.add_command(serve_cli.serve)  # lorarl serve manifest (cli/serve.py)
