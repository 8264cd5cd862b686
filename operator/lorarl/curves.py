"""``lorarl plot JOB`` and ``lorarl watch JOB``: a run's curves without Prometheus or W&B.

Both read the LoraRLJob only (``status.history``, the reporter's decimated curves; ``progress``;
``spec.health``), with the caller's kubeconfig, so they need no access to the job's pods or
volume. ``plot`` draws reward, the logprob gap with the health threshold, and each eval set over
rollouts into a PNG (matplotlib: ``pip install 'lorarl[plot]'``); ``watch`` redraws one line
per job in the terminal: a progress bar, the ETA and sparklines of the same curves.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

DEFAULT_MAX_LOGPROB_ABS_DIFF = 0.03  # api.types.HealthSpec's default (not imported: pydantic is slow to load)
SPARKS = "▁▂▃▄▅▆▇█"


def _health(body: dict[str, Any]) -> tuple[float, float | None]:
    health = (body.get("spec") or {}).get("health") or {}
    return float(health.get("maxLogprobAbsDiff", DEFAULT_MAX_LOGPROB_ABS_DIFF)), health.get("minEvalScore")


def curves(body: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """{series name: [(rollout, value)]} from status.history ("eval/<set>" per eval set)."""
    history = (body.get("status") or {}).get("history") or {}
    out = {}
    for key, name in (("reward", "reward"), ("logprobAbsDiff", "logprob gap")):
        if history.get(key):
            out[name] = [(float(r), float(v)) for r, v in history[key]]
    for entry in history.get("eval") or []:
        if entry.get("points"):
            out[f"eval/{entry['name']}"] = [(float(r), float(v)) for r, v in entry["points"]]
    return out


def draw(body: dict[str, Any], path: str) -> int:
    """Write the PNG; returns the number of curves drawn."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    series = curves(body)
    meta, st = body.get("metadata") or {}, body.get("status") or {}
    max_diff, min_eval = _health(body)
    progress = st.get("progress") or {}
    fig, (reward, gap, evals) = plt.subplots(3, 1, figsize=(8, 9), sharex=True, constrained_layout=True)
    title = f"{meta.get('namespace', '')}/{meta.get('name', '')}: {st.get('phase') or 'no phase yet'}, rollout {progress.get('rollout', 0)} of {progress.get('total', '?')}"
    fig.suptitle(title)
    drawn = 0
    if "reward" in series:
        xs, ys = zip(*series["reward"], strict=True)
        reward.plot(xs, ys, color="tab:blue", label="raw reward")
        drawn += 1
    reward.set_ylabel("rollout/raw_reward")
    if "logprob gap" in series:
        xs, ys = zip(*series["logprob gap"], strict=True)
        gap.plot(xs, ys, color="tab:orange", label="train/rollout logprob |diff|")
        drawn += 1
    gap.axhline(max_diff, color="tab:red", linestyle="--", label=f"spec.health.maxLogprobAbsDiff {max_diff:g} (on the mean)")
    mean = (st.get("metrics") or {}).get("trainRolloutLogprobAbsDiffMean")
    if isinstance(mean, (int, float)):
        gap.axhline(mean, color="tab:gray", linestyle=":", label=f"mean so far {mean:g}")
    gap.set_ylabel("logprob gap")
    for name, points in series.items():
        if name.startswith("eval/"):
            xs, ys = zip(*points, strict=True)
            evals.plot(xs, ys, marker="o", markersize=3, label=name[5:])
            drawn += 1
    if isinstance(min_eval, (int, float)):
        evals.axhline(min_eval, color="tab:red", linestyle="--", label=f"spec.health.minEvalScore {min_eval:g}")
    evals.set_ylabel("eval score")
    evals.set_xlabel("rollout")
    for axes in (reward, gap, evals):
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(loc="best", fontsize="small")
    if not drawn:
        reward.text(0.5, 0.5, "no status.history yet (the reporter writes it once the run trains)", transform=reward.transAxes, ha="center")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn


def sparkline(values: list[float], width: int = 24) -> str:
    if not values:
        return ""
    values = values[-width:]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARKS[min(len(SPARKS) - 1, int((v - low) / span * len(SPARKS)))] for v in values)


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def frame(body: dict[str, Any], width: int = 30) -> str:
    """One watch line: name, phase, bar, rollout N/M, percent, ETA, the latest values and sparklines."""
    meta, st = body.get("metadata") or {}, body.get("status") or {}
    progress = st.get("progress") or {}
    done, total = int(progress.get("rollout") or 0), int(progress.get("total") or 0)
    filled = min(width, done * width // total) if total else 0
    bar = "█" * filled + "░" * (width - filled)
    parts = [f"{meta.get('name', '?')} {st.get('phase') or 'New'}", f"[{bar}] {done}/{total or '?'} {progress.get('percent', 0)}%"]
    if st.get("phase") == "Running":
        parts.append(f"ETA {_duration(progress.get('etaSeconds'))}")
    series = curves(body)
    for name in ("reward", "logprob gap"):
        if name in series:
            parts.append(f"{name} {series[name][-1][1]:.4g} {sparkline([v for _, v in series[name]])}")
    for name, points in series.items():
        if name.startswith("eval/"):
            parts.append(f"{name[5:]} {points[-1][1]:.4g}")
    return "  ".join(parts)


def _read(namespace: str | None, name: str) -> dict[str, Any]:
    import kubernetes

    try:
        kubernetes.config.load_kube_config()
        _, context = kubernetes.config.list_kube_config_contexts()
        namespace = namespace or context.get("context", {}).get("namespace") or "default"
    except (kubernetes.config.ConfigException, OSError) as err:
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            raise click.ClickException(f"no Kubernetes configuration ($KUBECONFIG, ~/.kube/config or in-cluster): {err}") from None
        namespace = namespace or "default"
    api = kubernetes.client.CustomObjectsApi()
    try:
        job: dict[str, Any] = api.get_namespaced_custom_object("lorarl.dev", "v1alpha1", namespace, "lorarljobs", name)  # type: ignore[assignment]  # the object's JSON (the client types it object)
        return job
    except kubernetes.client.ApiException as err:
        if err.status == 404:
            raise click.ClickException(f"lorarljob {namespace}/{name} not found") from None
        raise click.ClickException(f"reading lorarljob {namespace}/{name}: {err.status} {err.reason}") from None


@click.command()
@click.argument("job")
@click.option("-n", "--namespace", default=None, help="Namespace of the job [default: the kubeconfig context's].")
@click.option("-o", "--output", "output", default="curves.png", show_default=True, type=click.Path(dir_okay=False, writable=True), help="PNG to write.")
def plot(job: str, namespace: str | None, output: str) -> None:
    """Draw a job's reward, logprob gap (with the health threshold) and eval curves into a PNG."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.ClickException("lorarl plot needs matplotlib: pip install 'lorarl[plot]'") from None
    body = _read(namespace, job)
    drawn = draw(body, output)
    click.echo(f"{output}: {drawn} curve{'s' if drawn != 1 else ''} of {body['metadata']['namespace']}/{job}")


@click.command()
@click.argument("job")
@click.option("-n", "--namespace", default=None, help="Namespace of the job [default: the kubeconfig context's].")
@click.option("--interval", default=5.0, show_default=True, type=click.FloatRange(0.5), help="Seconds between reads.")
@click.option("--once", is_flag=True, help="Print one line and exit.")
def watch(job: str, namespace: str | None, interval: float, once: bool) -> None:
    """Follow a job in the terminal: progress bar, ETA and sparklines, until it finishes."""
    tty = sys.stdout.isatty()
    while True:
        body = _read(namespace, job)
        line = frame(body)
        click.echo(f"\r\x1b[2K{line}" if tty else line, nl=not tty)
        if once or (body.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            if tty:
                click.echo()
            return
        time.sleep(interval)
