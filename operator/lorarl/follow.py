"""``lorarl logs``, ``lorarl status`` and ``lorarl wait``: follow one job through the API server.

The pure parts (``status_text``, ``outcome``, ``submitter_pod``) read a LoraRLJob as the API
server returns it; the commands only fetch. The trainer's output reaches the API server in the
log of KubeRay's submitter pod: ``ray job submit`` (without --no-wait) streams the Ray job's
logs, i.e. the entrypoint's output (KubeRay v1.5.0 ray-operator/controllers/ray/common/job.go,
GetK8sJobCommand; the head pod's own log holds ``ray start``, not the trainer). It outlives the
run's RayCluster: KubeRay deletes the cluster when the run ends and keeps the submitter Job "so
that users can still access the driver logs" (v1.5.1 rayjob_controller.go 1340-1341).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from .api import types as api
from .control import status as keys
from .reporter import statuskeys as K

# exit codes of `lorarl wait` (documented in docs/troubleshooting.md)
SUCCEEDED_EXIT, FAILED_EXIT, STALLED_EXIT, TIMEOUT_EXIT = 0, 1, 3, 124
SUBMITTER_CONTAINER = "ray-job-submitter"  # KubeRay's submitter container (common/job.go)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # set on a Job's pods by the Job controller (k8s >= 1.27)


def condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get(keys.CONDITIONS) or [] if c.get("type") == type_), {})


def outcome(body: dict[str, Any] | None) -> tuple[int, str] | None:
    """(exit code, one line) once the job has an answer for ``lorarl wait``; None: keep waiting.
    Only a status written for the current generation counts (a just-edited job is not judged by
    its previous spec)."""
    if body is None:
        return FAILED_EXIT, "the LoraRLJob does not exist (deleted?)"
    st = body.get("status") or {}
    if st.get(keys.OBSERVED_GENERATION) != (body.get("metadata") or {}).get("generation"):
        return None
    phase = st.get(keys.PHASE)
    if phase == keys.SUCCEEDED:
        return SUCCEEDED_EXIT, f"Succeeded: {condition(body, keys.SUCCEEDED).get('message', '')}".rstrip(": ")
    if phase == keys.FAILED:
        failed = condition(body, keys.FAILED)
        return FAILED_EXIT, f"Failed: {failed.get('reason', '?')}: {failed.get('message', '')}"
    stalled = condition(body, keys.STALLED)
    if stalled.get("status") == "True":
        return STALLED_EXIT, f"Stalled ({phase}): {stalled.get('reason', '?')}: {stalled.get('message', '')}"
    return None


def progress_bar(done: int, total: int, width: int = 30) -> str:
    filled = 0 if total <= 0 else min(width, done * width // total)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _duration(seconds: int | float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def status_text(body: dict[str, Any]) -> str:
    """What `lorarl status` prints: phase and why, progress, the latest numbers, where to look."""
    meta, spec, st = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    name, namespace = meta.get("name", "?"), meta.get("namespace", "default")
    ready = condition(body, keys.READY)
    stalled = condition(body, keys.STALLED).get("status") == "True"
    lines = [
        f"{api.KIND} {namespace}/{name}",
        f"  phase:     {st.get(keys.PHASE) or 'Pending (not yet reconciled)'}" + ("  (stalled: needs a fix)" if stalled else ""),
    ]
    if ready:
        lines.append(f"  reason:    {ready.get('reason')}: {ready.get('message', '')}")
    progress = st.get(K.PROGRESS) or {}
    total = progress.get(K.TOTAL) or ((spec.get("rollout") or {}).get("numRollouts") or 0)
    done = progress.get(K.ROLLOUT, 0)
    lines.append(
        f"  progress:  {progress_bar(done, total)} {done}/{total} rollouts ({progress.get(K.PERCENT, 0)}%)  ETA {_duration(progress.get(K.ETA_SECONDS))}"
    )
    if progress.get(K.GPU_HOURS) is not None:
        lines.append(f"  gpu-hours: {progress[K.GPU_HOURS]}" + (f"  (attempt {progress[K.ATTEMPTS]})" if progress.get(K.ATTEMPTS) else ""))
    if progress.get(K.LAST_UPDATE_TIME):
        lines.append(f"  updated:   {progress[K.LAST_UPDATE_TIME]}")
    metrics = st.get(K.METRICS) or {}
    shown = [
        (label, metrics.get(key))
        for label, key in (("step", K.STEP), ("reward", K.RAW_REWARD), ("loss", K.LOSS), ("kl", K.KL), ("logprob-diff", K.LOGPROB_DIFF_MEAN))
    ]
    if any(v is not None for _, v in shown):
        lines.append("  metrics:   " + "  ".join(f"{label} {v}" for label, v in shown if v is not None))
    for bad in metrics.get(K.NON_FINITE) or []:  # the values above are the last finite ones
        lines.append(
            f"  non-finite: {bad.get(K.NF_METRIC)} {bad.get(K.NF_VALUE)} since rollout {bad.get(K.NF_SINCE)} "
            f"({bad.get(K.NF_STREAK)} rollouts in a row, the latest {bad.get(K.NF_ROLLOUT)})"
        )
    for score in st.get(K.EVAL) or []:
        lines.append(
            f"  eval:      {score.get(K.EVAL_NAME)} {score.get(K.EVAL_LATEST)} (rollout {score.get(K.EVAL_LATEST_ROLLOUT)}; best {score.get(K.EVAL_BEST)})"
        )
    healthy = condition(body, keys.TRAINING_HEALTHY)
    if healthy:
        lines.append(f"  health:    {healthy.get('status')} {healthy.get('reason')}")
    ckpt = st.get(K.CHECKPOINTS) or {}
    if ckpt.get(K.LATEST_PATH):
        lines.append(f"  checkpoint: iteration {ckpt.get(K.LATEST_ITERATION)} at {ckpt[K.LATEST_PATH]} (on the job volume)")
    tracking = st.get(K.TRACKING) or {}
    if tracking.get(K.WANDB_RUN_URL):
        lines.append(f"  wandb:     {tracking[K.WANDB_RUN_URL]}")
    ray = st.get(keys.RAY_JOB) or {}
    lines.append(f"  logs:      lorarl logs -f {name} -n {namespace}   (KubeRay's submitter pod of RayJob {ray.get('name', name)})")
    lines.append(f"  details:   kubectl describe lrl {name} -n {namespace}; docs/troubleshooting.md for the reason")
    return "\n".join(lines)


def submitter_pod(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest submitter pod that has started (a retried submitter is a new pod)."""
    started = [p for p in pods if ((p.get("status") or {}).get("phase") or "Pending") != "Pending"]
    return max(started, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", default=None)


# -- the commands ---------------------------------------------------------------------------


def _connect(namespace: str | None) -> tuple[Any, str]:
    import kubernetes

    from .runtime.kube import Api

    try:
        kube = Api.from_environment()
    except kubernetes.config.ConfigException as err:
        raise click.ClickException(f"no Kubernetes configuration (in-cluster, $KUBECONFIG or ~/.kube/config): {err}") from None
    if namespace is None:
        try:
            namespace = kubernetes.config.list_kube_config_contexts()[1].get("context", {}).get("namespace")
        except Exception:  # noqa: BLE001 - in-cluster or no contexts: the default namespace
            namespace = None
    return kube, namespace or "default"


def _get(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    from .runtime.kube import ApiError

    try:
        return kube.get(api.API_VERSION, api.KIND, namespace, name)
    except ApiError as err:
        raise click.ClickException(f"reading {api.KIND} {namespace}/{name}: {err}") from None


namespace_option = click.option("-n", "--namespace", default=None, help="The job's namespace [default: the kubeconfig context's, else default].")


@click.command()
@click.argument("name")
@namespace_option
def status(name: str, namespace: str | None) -> None:
    """Print a job's phase and why, progress, ETA, the latest metrics and where logs and checkpoints are."""
    kube, namespace = _connect(namespace)
    body = _get(kube, namespace, name)
    if body is None:
        raise click.ClickException(f"{api.KIND} {namespace}/{name} not found")
    click.echo(status_text(body))


@click.command()
@click.argument("name")
@namespace_option
@click.option("--timeout", default="0", help="Give up after this long (e.g. 90s, 30m, 6h; 0: never).")
@click.option("--interval", default=2.0, type=float, show_default=True, hidden=True, help="Seconds between reads.")
def wait(name: str, namespace: str | None, timeout: str, interval: float) -> None:
    """Wait for a job to finish: exit 0 on Succeeded; 1 on Failed, 3 when Stalled (a fix is
    needed), 124 on --timeout, each with the reason on stderr."""
    limit = _seconds(timeout)
    kube, namespace = _connect(namespace)
    deadline = time.monotonic() + limit if limit else None
    while True:
        verdict = outcome(_get(kube, namespace, name))
        if verdict is not None:
            code, line = verdict
            click.echo(f"{api.KIND} {namespace}/{name}: {line}", err=code != 0)
            sys.exit(code)
        if deadline is not None and time.monotonic() >= deadline:
            body = _get(kube, namespace, name) or {}
            ready = condition(body, keys.READY)
            phase = (body.get("status") or {}).get(keys.PHASE)
            click.echo(
                f"{api.KIND} {namespace}/{name}: timed out after {timeout} in phase {phase}: {ready.get('reason')}: {ready.get('message', '')}", err=True
            )
            sys.exit(TIMEOUT_EXIT)
        time.sleep(interval)


def _seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration (e.g. 90s, 30m, 6h)", param_hint="--timeout") from None


@click.command()
@click.argument("name")
@namespace_option
@click.option("-f", "--follow", is_flag=True, help="Keep streaming as the trainer prints (waits for the submitter to start).")
def logs(name: str, namespace: str | None, follow: bool) -> None:
    """Print the trainer's output (the log of KubeRay's submitter pod, read through the API server;
    kept after the run ends, when the Ray cluster is gone)."""
    import kubernetes

    kube, namespace = _connect(namespace)
    core = kubernetes.client.CoreV1Api(kube.client)
    said = None
    while True:
        body = _get(kube, namespace, name)
        if body is None:
            raise click.ClickException(f"{api.KIND} {namespace}/{name} not found")
        rayjob = ((body.get("status") or {}).get(keys.RAY_JOB) or {}).get("name") or name
        listed = kube.list("v1", "Pod", namespace, f"{JOB_NAME_LABEL}={rayjob}")
        pod = submitter_pod(listed)
        if pod is not None:
            break
        verdict = outcome(body)
        ready = condition(body, keys.READY)
        why = f"{(body.get('status') or {}).get(keys.PHASE) or 'Pending'}: {ready.get('reason', '')}: {ready.get('message', '')}"
        if verdict is not None or not follow:
            raise click.ClickException(f"no trainer output yet (the submitter pod of RayJob {rayjob} has not started; {why})")
        if why != said:
            click.echo(f"waiting for the trainer to start ({why})", err=True)
            said = why
        time.sleep(2)
    # with _preload_content=False the client returns the urllib3 response (it types the decoded str)
    response: Any = core.read_namespaced_pod_log(
        pod["metadata"]["name"], namespace, container=SUBMITTER_CONTAINER, follow=follow, _preload_content=False, _request_timeout=None if follow else 60
    )
    try:
        for chunk in response.stream(4096, decode_content=True):
            sys.stdout.write(chunk.decode("utf-8", "replace"))
            sys.stdout.flush()
    finally:
        response.release_conn()
