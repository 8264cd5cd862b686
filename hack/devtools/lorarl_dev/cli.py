"""``lorarl-dev``: development commands that need a source checkout (never in the image).

The embedded control plane for tests and demos, the local demo, and docs generation.
"""

from __future__ import annotations

import pathlib

import click
from lorarl import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lorarl-dev")
def main() -> None:
    """Development tooling for lorarl (source checkout only)."""


def _emit(text: str, output: pathlib.Path | None) -> None:
    """A generated file's text: written to ``output``, or printed."""
    if output:
        output.write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)


@main.command("docs")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=pathlib.Path), default=None, help="Write here instead of stdout.")
def docs_cmd(output: pathlib.Path | None) -> None:
    """Print the API reference (docs/api.md) generated from the model."""
    from .docsgen import api_markdown

    _emit(api_markdown(), output)


@main.command("known-fields")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=pathlib.Path), default=None, help="Write here instead of stdout.")
def known_fields_cmd(output: pathlib.Path | None) -> None:
    """Print the spec's declared fields (operator/lorarl/control/known_fields.json) from the CRD."""
    from lorarl.admission.crdgen import known_fields_json

    _emit(known_fields_json(), output)


@main.command("job-references")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=pathlib.Path), default=None, help="Write here instead of stdout.")
def job_references_cmd(output: pathlib.Path | None) -> None:
    """Print the job-authority policy's reference checks (charts/lorarl-operator/files/job-references.yaml)."""
    from lorarl.admission.policy import rules_yaml

    _emit(rules_yaml(), output)


@main.group()
def controlplane() -> None:
    """The embedded control plane (etcd, kube-apiserver, kube-controller-manager) for tests and demos."""


@controlplane.command("build")
def controlplane_build() -> None:
    """Build (or reuse) the control-plane binaries from the Go module proxy."""
    from .binaries import ensure_binaries

    click.echo(ensure_binaries())


@controlplane.command("up")
@click.option("--state-dir", default=None, help="Where pids, logs, certificates and the kubeconfig live.")
@click.option(
    "--node",
    is_flag=True,
    help="Also run one real node (containerd, kubelet, kube-proxy, CoreDNS), "
    "the whole cluster in a network namespace of its own (root and hack/node/packages.sh needed).",
)
@click.option(
    "--gpus", default=8, show_default=True, type=click.IntRange(min=0), help="With --node: how many fake amd.com/gpu the node's device plugin advertises."
)
def controlplane_up(state_dir: str | None, node: bool, gpus: int) -> None:
    """Start a control plane that outlives this command (or reuse a healthy one)."""
    from . import controlplane as cp_mod

    try:
        cp = cp_mod.up(state_dir, **({"node": True, "gpus": gpus} if node else {}))
    except cp_mod.ControlPlaneError as err:
        raise click.ClickException(str(err)) from err
    click.echo(f"export KUBECONFIG={cp.kubeconfig}")


@controlplane.command("down")
@click.option("--state-dir", default=None)
def controlplane_down(state_dir: str | None) -> None:
    """Stop the control plane started by `up`."""
    from . import controlplane as cp_mod

    click.echo("stopped" if cp_mod.down(state_dir) else "not running")


@controlplane.command("env")
@click.option("--state-dir", default=None)
def controlplane_env(state_dir: str | None) -> None:
    """Print shell exports for the running control plane (eval "$(lorarl-dev controlplane env)")."""
    import shlex

    from . import controlplane as cp_mod

    for key, value in cp_mod.env(state_dir).items():
        click.echo(f"export {key}={shlex.quote(value)}")


@main.group(invoke_without_command=True)
@click.option("--state-dir", default=None, help="Where the demo keeps its control plane and operator state.")
@click.option("--pace", default=0.15, show_default=True, type=float, help="Seconds per simulated rollout.")
@click.option(
    "--mode",
    type=click.Choice(["auto", "real", "simulated"]),
    default="auto",
    show_default=True,
    help="real: real pods on one real node (root and hack/node/packages.sh); simulated: KubeRay's "
    "status and the trainer's log simulated; auto: real where the machine allows it.",
)
@click.pass_context
def demo(ctx: click.Context, state_dir: str | None, pace: float, mode: str) -> None:
    """The local demo: control plane + operator + the seed example, with live status."""
    if ctx.invoked_subcommand is None:
        from . import demo as demo_mod

        demo_mod.run_mode(state_dir, pace, mode)


@demo.command("down")
@click.option("--state-dir", default=None)
def demo_down(state_dir: str | None) -> None:
    """Stop the demo's operator and control plane."""
    from . import demo as demo_mod

    demo_mod.down(state_dir)


@main.group()
def images() -> None:
    """The operator and job images, built here from Debian packages with buildah (no registry)."""


@images.command("build")
@click.argument("which", type=click.Choice(["operator", "job", "all"]), default="all")
def images_build(which: str) -> None:
    """Build (or reuse) OCI archives under ~/.cache/lorarl/images for `ctr images import`."""
    import time

    from . import images as images_mod

    names = list(images_mod.IMAGES) if which == "all" else [which]
    for name in names:
        started = time.monotonic()
        try:
            artifact = images_mod.build(name, echo=True)
        except images_mod.ImageBuildError as exc:
            raise click.ClickException(str(exc)) from None
        size = artifact.archive.stat().st_size / 2**20
        how = "built" if artifact.built else "cached"
        click.echo(f"{name}\t{artifact.ref}\t{artifact.archive}\t{size:.0f} MiB\t{how} in {time.monotonic() - started:.2f} s")


@images.command("ref")
@click.argument("which", type=click.Choice(["operator", "job"]))
def images_ref(which: str) -> None:
    """Print the reference `images build` gives an image (a pod spec's image), building nothing."""
    from . import images as images_mod

    try:
        click.echo(images_mod.planned(which).ref)
    except images_mod.ImageBuildError as exc:
        raise click.ClickException(str(exc)) from None


@images.command("pins")
def images_pins() -> None:
    """Re-resolve hack/images/job/requirements.txt and rewrite the pins in its constraints.txt."""
    from . import images as images_mod

    job = images_mod.REPO / images_mod.IMAGES["job"].context
    constraints = job / "constraints.txt"
    header = [line for line in constraints.read_text().splitlines() if line.startswith("#")]
    pins = images_mod.resolve_pins(job / "requirements.txt")
    constraints.write_text("\n".join(header + pins) + "\n")
    click.echo(f"{constraints}: {len(pins)} pins")


if __name__ == "__main__":  # pragma: no cover
    main()
