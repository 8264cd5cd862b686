"""`lorarl-dev demo`: the whole flow on an embedded control plane, on a machine without GPUs.

Two modes, said on screen (``--mode auto`` picks ``real`` where the machine allows it: root and
the Debian packages of hack/node/packages.sh):

real
    one real node (lorarl_dev.node) with the real KubeRay operator, the operator installed with
    helm from the image built here, the seed job (lorarl_dev.seedrun's node overrides) running in
    real pods: the init container downloads from the Hub stand-in, real Ray runs the trainer
    stand-in (the only stand-ins: no GPU, miles or Hugging Face Hub here).
simulated
    etcd, kube-apiserver, kube-controller-manager, the operator (`lorarl run`), kubectl, the
    CRDs, the in-job reporter and its per-job ServiceAccount are real; KubeRay's status updates
    (lorarl_dev.kuberay_sim) and the trainer's log (a synthetic miles log) are simulated.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import click
import yaml
from lorarl.admission.validation import parse_job
from lorarl.job import artifact, paths, render
from lorarl.runtime.kube import Api

from . import binaries, controlplane, locations, mileslog, processes
from .kuberay_sim import FakeKubeRay

NAMESPACE = "default"
EXAMPLE = "manifests/qwen3-4b-lora-amd.yaml"

# Prints the lines of argv[1] with a pause of argv[2] seconds after each optimizer step.
PACED_PRINTER = r"""
import sys, time
pause = float(sys.argv[2])
for line in open(sys.argv[1], encoding="utf-8"):
    sys.stdout.write(line); sys.stdout.flush()
    if "log_utils.py:542 - step " in line:  # each step is printed twice; pause once per step
        time.sleep(pause)
"""


def _on_volume(path: str, volume: str) -> str:
    """A path under the job volume's mount point (/root/shared_data) moved under ``volume``."""
    if path == paths.SHARED_DIR or path.startswith(paths.SHARED_DIR + "/"):
        return volume + path[len(paths.SHARED_DIR) :]
    return path


def simulated_reporter_args(entrypoint: str, volume: str) -> list[str]:
    """The reporter's arguments from the RayJob's entrypoint (``python3 reporter.pyz ARGS --
    train.py ...``), with paths on the job volume moved under the local directory ``volume``."""
    words = shlex.split(entrypoint)
    if len(words) < 3 or not words[1].endswith(paths.REPORTER_FILE) or "--" not in words:
        raise click.ClickException(f"the RayJob's entrypoint does not start the reporter: {entrypoint[:120]}")
    return [_on_volume(w, volume) for w in words[2 : words.index("--")]]


def state_dir(base: str | None) -> pathlib.Path:
    return pathlib.Path(base) if base else locations.default_state_dir()


def _say(step: str, text: str) -> None:
    click.secho(f"[{step}] ", fg="cyan", bold=True, nl=False, err=False)
    click.echo(text)


def _down_hint(base: str | None) -> str:
    """The command that stops this demo: with ``--state-dir`` when one was given."""
    exe = pathlib.Path(sys.executable).with_name("lorarl-dev")  # `make demo` runs it from .venv/bin, not on PATH
    return f"{exe if exe.exists() else 'lorarl-dev'} demo down" + (f" --state-dir {shlex.quote(base)}" if base else "")


def _operator_pid_file(state: pathlib.Path) -> pathlib.Path:
    return state / "operator.pid"


def start_operator(cp: controlplane.ControlPlane, state: pathlib.Path) -> int:
    stop_operator(state)
    log = open(state / "operator.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lorarl.cli", "run", "-n", NAMESPACE, "--liveness", "", "--metrics-port", "0", "--resync-seconds", "5", "--log-format", "plain"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **cp.env()},
        start_new_session=True,
    )
    _operator_pid_file(state).write_text(str(proc.pid))
    return proc.pid


def stop_operator(state: pathlib.Path) -> bool:
    pid_file = _operator_pid_file(state)
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text())
    try:
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pid_file.unlink(missing_ok=True)
    return True


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise click.ClickException(f"timed out after {timeout:.0f}s waiting for {what}")


def _show_jobs(cp: controlplane.ControlPlane) -> None:
    out = cp.kubectl("get", "lorarljobs", "-n", NAMESPACE, "-o", "wide", check=False).stdout.rstrip()
    click.echo(out)


def _show_progress(job: dict) -> None:
    progress = (job.get("status") or {}).get("progress") or {}
    checkpoints = (job.get("status") or {}).get("checkpoints") or {}
    click.echo(
        f"      progress: rollout {progress.get('rollout')}/{progress.get('total')}, "
        f"gpuHours {progress.get('gpuHours', 'none (counted from pods: there are none in the simulated mode)')}, "
        f"latest checkpoint {checkpoints.get('latestPath')}"
    )


def run(base: str | None, pace: float) -> None:
    state = state_dir(base)
    state.mkdir(parents=True, exist_ok=True)
    repo = locations.repo_root()

    _say("1/6", "control-plane binaries (built once from the Go module proxy; a cold build takes ~7 min on 2 cores)")
    bin_dir = binaries.ensure_binaries()
    click.echo(f"      {bin_dir}")

    _say("2/6", "starting etcd + kube-apiserver + kube-controller-manager, installing the CRDs")
    cp = controlplane.up(state)
    if cp.netns is not None:  # a real-pods demo's cluster: its helm-installed operator would fight a second one
        click.echo(f"      {state} holds the real-pods demo's cluster: stopping it for the simulated one")
        controlplane.down(state)
        cp = controlplane.up(state)
    click.echo(f"      {cp.server}")

    _say("3/6", "starting the operator (lorarl run)")
    pid = start_operator(cp, state)
    click.echo(f"      pid {pid}, log {state / 'operator.log'}")

    _say("4/6", f"kubectl apply -f {EXAMPLE}")
    doc = yaml.safe_load((repo / EXAMPLE).read_text())
    name = doc["metadata"]["name"]
    cp.kubectl("delete", "lorarljob", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true")
    click.echo("      " + cp.kubectl("apply", "-n", NAMESPACE, "-f", str(repo / EXAMPLE)).stdout.strip())

    client = cp.api_client()
    kube = Api(client)
    _say("5/6", "the operator reconciles it into a RayJob (and its ServiceAccount, Role, ConfigMap, PVC)")
    rayjob = _wait(lambda: kube.get(render.RAYJOB_API_VERSION, "RayJob", NAMESPACE, name), 60, "the RayJob")
    click.echo(cp.kubectl("get", "rayjobs,serviceaccounts,roles,configmaps,pvc", "-n", NAMESPACE, "-l", f"{render.JOB_LABEL}={name}").stdout.rstrip())
    gpus = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    click.echo(f"      GPUs per Ray pod: {gpus}")
    click.echo(f"      entrypoint: {rayjob['spec']['entrypoint'][:160]} ...")

    _say(
        "6/6",
        "SIMULATED: KubeRay status updates and a synthetic miles log (no kubelet/GPU here); the real "
        "reporter patches the status with the job's own ServiceAccount",
    )
    job = parse_job(kube.get("lorarl.dev/v1alpha1", "LoraRLJob", NAMESPACE, name))
    rollouts = job.spec.rollout.num_rollouts
    ray = FakeKubeRay(kube, NAMESPACE, name)
    ray.initializing()
    time.sleep(1.5)
    ray.submitted()
    ray.running()
    with tempfile.TemporaryDirectory() as tmp:
        # the reporter gets exactly the rendered entrypoint's arguments (so it reports what it
        # reports in a pod: checkpoints, attempts); only the volume's mount point is
        # a local directory, and the trainer after "--" is the paced synthetic log
        volume = pathlib.Path(tmp) / "volume"
        reporter_args = simulated_reporter_args(rayjob["spec"]["entrypoint"], str(volume))
        log_file = pathlib.Path(tmp) / "miles.log"
        eval_interval = job.spec.eval.interval if job.spec.eval.enabled else None
        log = mileslog.demo_lines(rollouts, eval_interval, job.spec.checkpoint.save_interval, _on_volume(paths.save_dir(job), str(volume)))
        log_file.write_text("\n".join(log) + "\n")
        shipped = pathlib.Path(tmp) / paths.REPORTER_FILE  # the zipapp the tools image holds and the head copies
        shipped.write_bytes(artifact.reporter_zipapp())
        token = pathlib.Path(tmp) / "token"
        token.write_text(cp.service_account_token(NAMESPACE, render.reporter_account_name(job)))
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")},
            "LORARL_API_SERVER": cp.server,
            "LORARL_TOKEN_FILE": str(token),
            "LORARL_CA_FILE": str(cp.ca_file),
        }
        reporter = subprocess.Popen(
            [sys.executable, "-I", "-S", str(shipped), *reporter_args, "--interval", "1", "--", sys.executable, "-c", PACED_PRINTER, str(log_file), str(pace)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        while reporter.poll() is None:
            _show_jobs(cp)
            time.sleep(2)
        if reporter.returncode != 0:
            raise click.ClickException(f"the reporter exited {reporter.returncode}: {reporter.stderr.read().decode()[-500:]}")
    ray.succeeded()
    _wait(lambda: (kube.get("lorarl.dev/v1alpha1", "LoraRLJob", NAMESPACE, name).get("status") or {}).get("phase") == "Succeeded", 60, "phase Succeeded")
    _show_jobs(cp)
    _show_progress(kube.get("lorarl.dev/v1alpha1", "LoraRLJob", NAMESPACE, name))
    client.close()
    click.echo()
    click.secho("Done. The control plane and the operator keep running:", bold=True)
    click.echo(f"  export KUBECONFIG={cp.kubeconfig}")
    click.echo(f"  {cp.kubectl_path} get lorarljobs,rayjobs -A")
    click.echo(f"  {cp.kubectl_path} describe lorarljob {name}")
    click.echo(f"  {_down_hint(base)}  # stop everything")


def real_node_possible() -> list[str]:
    """Why the real mode cannot run here (empty: it can)."""
    from .node import realnode

    return realnode.missing_requirements()


def run_mode(base: str | None, pace: float, mode: str) -> None:
    if mode == "auto":
        reasons = real_node_possible()
        mode = "simulated" if reasons else "real"
        if reasons:
            click.secho(f"mode: simulated (no real node here: {'; '.join(reasons)})", bold=True)
    if mode == "real":
        click.secho(
            "mode: REAL PODS (one real node, the real KubeRay operator, real Ray; stand-ins only for the GPUs, the miles trainer and the Hugging Face Hub)",
            bold=True,
        )
        run_real(base)
    else:
        click.secho("mode: SIMULATED (KubeRay's status and the trainer's log are simulated)", bold=True)
        run(base, pace)


def run_real(base: str | None) -> None:
    from . import hubstub, seedrun

    state = state_dir(base)
    state.mkdir(parents=True, exist_ok=True)
    _say("1/6", "binaries: control plane, kubelet, kube-proxy, CoreDNS, the KubeRay operator, helm (built once from the Go module proxy)")
    bin_dir = binaries.ensure_binaries((*binaries.REQUIRED_BINARIES, *binaries.NODE_BINARIES, "kuberay-operator", "helm"))
    click.echo(f"      {bin_dir}")
    _say("2/6", "starting the control plane with one real node and the KubeRay operator")
    cp = controlplane.up(state, node=True, gpus=8, kuberay_operator=True)
    if cp.netns is None:  # up() reuses what runs there: a simulated demo's control plane has no node
        click.echo(f"      {state} holds a control plane without a node (a simulated demo's): stopping it for the real one")
        stop_operator(state)
        controlplane.down(state)
        cp = controlplane.up(state, node=True, gpus=8, kuberay_operator=True)
    click.echo(f"      {cp.server} (the cluster lives in network namespace {cp.netns})")
    hub_root = state / "hub"
    if not (hub_root / "models").is_dir():
        hub_root.mkdir(parents=True, exist_ok=True)
        hubstub.make_seed_repos(str(hub_root))
    hub_pid = cp.pids.get("hubstub")  # none on a fresh cluster (and pid 0 would mean our own process group: "alive")
    if not (hub_pid and processes.pid_alive(hub_pid)):
        endpoint = seedrun.start_hub(cp, hub_root)
    else:
        endpoint = seedrun.hub_endpoint()
    click.echo(f"      Hugging Face Hub stand-in at {endpoint}")
    _say("3/6", "building (or reusing) the operator and job images, importing them into the node")
    refs = seedrun.import_images(cp)
    click.echo(f"      {refs['operator']}, {refs['job']}")
    _say("4/6", f"helm install the chart (namespace {seedrun.OPERATOR_NAMESPACE}, restricted Pod Security)")
    seedrun.install_operator(cp, refs["operator"], replicas=1)
    click.echo(cp.kubectl("get", "pods", "-n", seedrun.OPERATOR_NAMESPACE).stdout.rstrip())
    job = seedrun.seed_job(image=refs["job"], endpoint=endpoint, namespace=NAMESPACE)
    name = job["metadata"]["name"]
    _say("5/6", f"kubectl apply the seed ({EXAMPLE}) with the node's overrides (lorarl_dev.seedrun.seed_job)")
    cp.kubectl("delete", "lorarljob", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=300)
    click.echo("      " + cp.kubectl("apply", "-f", "-", input=json.dumps(job)).stdout.strip())
    _say("6/6", "the run in real pods: head pod, init container (hf download), ray start, KubeRay's submitter, the reporter")
    seen, deadline, phase, shown_rollout = set(), time.monotonic() + 1200, None, -10
    while time.monotonic() < deadline:
        status = (seedrun.get(cp, "lorarljob", name, NAMESPACE) or {}).get("status") or {}
        phase, rollout = status.get("phase"), (status.get("progress") or {}).get("rollout", -1)
        reason = next((c.get("reason") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        changed = (phase, reason) not in seen  # a reason too: a job stuck in Preparing says why (e.g. InputDownloadFailed)
        if changed:
            seen.add((phase, reason))
            click.echo(cp.kubectl("get", "pods,rayjobs", "-n", NAMESPACE, check=False).stdout.rstrip())
            if phase in ("Running", "Succeeded") and phase not in {p for p, _ in seen - {(phase, reason)}}:
                _say_real(cp, name, phase)
        if changed or rollout >= shown_rollout + 10 or phase in ("Succeeded", "Failed"):
            shown_rollout = rollout
            _show_jobs(cp)
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(3)
    client = cp.api_client()
    _show_progress(Api(client).get("lorarl.dev/v1alpha1", "LoraRLJob", NAMESPACE, name))
    client.close()
    if phase != "Succeeded":
        raise click.ClickException(
            f"the seed job ended {phase or 'not at all (20 min)'}: {cp.kubectl_path} --kubeconfig={cp.kubeconfig} describe lorarljob {name}; "
            f"then {_down_hint(base)}"
        )
    click.echo()
    click.secho("Done, on real pods. The cluster and the operator keep running:", bold=True)
    click.echo(f"  export KUBECONFIG={cp.kubeconfig}")
    click.echo(f"  {cp.kubectl_path} get lorarljobs,rayjobs,pods -A")
    click.echo(f"  {_down_hint(base)}  # stop everything (the node's pods, mounts and namespace too)")


def _say_real(cp: controlplane.ControlPlane, name: str, phase: str) -> None:
    """Say where the phase comes from: which real pod runs it and what KubeRay read from Ray."""
    from . import seedrun

    rayjob = (seedrun.get(cp, "rayjob", name, NAMESPACE) or {}).get("status") or {}
    heads = seedrun.pods(cp, NAMESPACE, "ray.io/node-type=head")
    where = ", ".join(f"{p['metadata']['name']} ({p['status'].get('phase')}) on node {p['spec'].get('nodeName')}" for p in heads) or "its pods already removed"
    click.secho(
        f"      {phase} ON REAL PODS: head pod {where}; KubeRay read the Ray job as {rayjob.get('jobStatus')} "
        f"(job id {rayjob.get('jobId')}) from the real Ray dashboard",
        bold=True,
    )


def down(base: str | None) -> None:
    state = state_dir(base)
    stopped = stop_operator(state)
    click.echo("operator stopped" if stopped else "operator was not running")
    click.echo("control plane stopped" if controlplane.down(state) else "control plane was not running")
