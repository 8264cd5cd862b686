"""A run seen the way a platform team sees it: the real operator on the embedded control plane,
scraped every second by a real Prometheus (Debian's, on 127.0.0.1), through a run; then every
query of the chart's Grafana dashboard is evaluated by that Prometheus and must return data;
``lorarl plot`` draws the run's curves and they match the log the run produced.

Simulated, and labelled as such (as in tests/operator): KubeRay's RayJob status steps
(lorarl_dev.kuberay_sim) and the trainer (a synthetic miles log fed through the real shipped
reporter, as the job's own ServiceAccount). Recorded: the AMD device metrics exporter's and
Kueue's series, served on loopback with the exporters' metric names and labels (sources cited in
hack/observability/dashboard.py), because neither GPUs nor a Kueue-admitted workload run here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from lorarl_dev.operatorproc import OperatorProcess
from lorarl_dev.processes import free_port

from tests.helpers import NAME, REPO, api_node, apply_job, gpu_pod, job, metrics_reader_token, phase_is, running, seed_doc, shipped_reporter, wait_for
from tests.reporter.reporter_testlib import generate_miles_log, r4

pytestmark = pytest.mark.controlplane
PROMETHEUS = shutil.which("prometheus")
DASHBOARD = REPO / "charts" / "lorarl-operator" / "files" / "dashboard.json"
POD = f"{NAME}-x7k2p-head-9zq4d"  # a head pod name as KubeRay makes them (<RayCluster>-head-<suffix>)


def recorded_exporters(namespace: str, started: float) -> str:
    """The AMD exporter's and Kueue's series at this moment: gauges that move, counters that grow."""
    t = time.time() - started
    lines = []
    for gpu in range(8):
        labels = f'gpu_id="{gpu}",hostname="node-1",card_model="MI355X",pod="{POD}",namespace="{namespace}",container="ray-head"'
        lines.append(f"gpu_gfx_activity{{{labels}}} {60 + (gpu * 5 + int(t)) % 40}")
        lines.append(f"gpu_package_power{{{labels}}} {700 + (gpu * 13 + int(t) * 7) % 300}")
    lines.append(f'gpu_gfx_activity{{gpu_id="0",hostname="node-2",pod="other-job-head-1",namespace="{namespace}"}} 5')  # another job's pod
    lines.append('kueue_pending_workloads{cluster_queue="gpu-queue",status="active"} 2')
    waits = int(t * 4)
    for le, share in (("1", 0.2), ("10", 0.6), ("60", 0.9), ("+Inf", 1.0)):
        lines.append(f'kueue_admission_wait_time_seconds_bucket{{cluster_queue="gpu-queue",le="{le}"}} {int(waits * share)}')
    lines.append(f'kueue_admission_wait_time_seconds_count{{cluster_queue="gpu-queue"}} {waits}')
    lines.append(f'kueue_admission_wait_time_seconds_sum{{cluster_queue="gpu-queue"}} {waits * 9.5}')
    return "\n".join(lines) + "\n"


class Recorded(threading.Thread):
    def __init__(self, namespace: str) -> None:
        super().__init__(daemon=True)
        started, ns = time.time(), namespace

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body = recorded_exporters(ns, started).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def run(self) -> None:
        self.server.serve_forever(poll_interval=0.2)


class Prometheus:
    """The real prometheus server on 127.0.0.1, scraping every second."""

    def __init__(self, tmp_path, targets: dict[str, int], tokens: dict[str, str] | None = None) -> None:
        """``tokens``: a bearer token per target that needs one (the operator's authenticated /metrics)."""
        self.port = free_port()
        tokens = tokens or {}
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": name,
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                    **({"authorization": {"type": "Bearer", "credentials": tokens[name]}} if name in tokens else {}),
                }
                for name, port in targets.items()
            ],
        }
        (tmp_path / "prometheus.yml").write_text(json.dumps(config))
        self.log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for(self.ready, timeout=60, what="prometheus ready")

    def ready(self) -> bool:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2).status == 200
        except OSError:
            return False

    def query(self, expr: str, path="query", **params) -> list:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?" + urllib.parse.urlencode({"query": expr, **params})
        answer = json.loads(urllib.request.urlopen(url, timeout=30).read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def dashboard_queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels if p["type"] != "row" for t in p["targets"]]


def concrete(expr: str, namespace: str) -> str:
    return expr.replace("$namespace", namespace).replace("$lorarljob", NAME).replace("$__range", "1h")


# the trainer stand-in: prints the log, pausing after each rollout line (a run of ~20 s that
# Prometheus sees move), and exits 0
TRAINER = r"""
import sys, time
for line in open(sys.argv[1], "rb").read().splitlines(keepends=True):
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
    if b"rollout " in line and b"{" in line:
        time.sleep(float(sys.argv[2]))
"""


def run_reporter(control_plane, kube, namespace, tmp_path, log) -> subprocess.CompletedProcess:
    """The shipped reporter as the job's own ServiceAccount over ``log``, with 8 GPUs (GPU-hours)."""
    token = tmp_path / "token"
    token.write_text(control_plane.service_account_token(namespace, f"{NAME}-reporter"))
    (tmp_path / "miles.log").write_bytes(log.data)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "LORARL_"))}
    env.update(LORARL_API_SERVER=control_plane.server, LORARL_TOKEN_FILE=str(token), LORARL_CA_FILE=str(control_plane.ca_file))
    command = [*shipped_reporter(tmp_path), "--namespace", namespace, "--name", NAME, "--total-rollouts", str(log.num_rollouts)]
    command += ["--gpus", "8", "--interval", "0.2", "--", sys.executable, "-c", TRAINER, str(tmp_path / "miles.log"), "0.3"]
    return subprocess.run(command, capture_output=True, env=env, timeout=600)


def draw_dashboard_data(prom: Prometheus, namespace: str, start: float, end: float, path) -> None:
    """A screenshot-like PNG of the per-job row: each panel's series as Prometheus returns them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] == "timeseries"]
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(15, 3 * rows), constrained_layout=True)
    for ax, p in zip(axes.flat, panels, strict=False):
        for t in p["targets"]:
            for series in prom.query(concrete(t["expr"], namespace), "query_range", start=start, end=end, step=1):
                xs = [float(x) - start for x, _ in series["values"]]
                ys = [float(y) for _, y in series["values"]]
                label = t["legendFormat"]
                for k, v in series["metric"].items():
                    label = label.replace("{{" + k + "}}", v)
                ax.plot(xs, ys, label=label)
        ax.set_title(p["title"], fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(f"lorarl dashboard, queried from Prometheus: {namespace}/{NAME} (seconds since the run began)")
    fig.savefig(path, dpi=80)
    plt.close(fig)


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus missing: run hack/observability/packages.sh (make packages) as root")
def test_a_run_scraped_by_prometheus_answers_every_dashboard_query(control_plane, namespace, kube, tmp_path):
    apply_job(control_plane, namespace, seed_doc())  # before the operator: it is in the first listing
    op_port = free_port()
    operator = OperatorProcess(
        control_plane, namespace, tmp_path, resync_seconds=3600, extra_args=("--metrics-port", str(op_port), "--metrics-address", "127.0.0.1")
    ).start()
    exporters = Recorded(namespace)
    exporters.start()
    # the operator's /metrics is authenticated (its default): Prometheus scrapes with the token of
    # an account bound to a ClusterRole like the chart's metrics reader, as in a cluster
    prom = Prometheus(
        tmp_path, {"lorarl-operator": op_port, "recorded-exporters": exporters.port}, {"lorarl-operator": metrics_reader_token(control_plane, namespace)}
    )
    began = time.time()
    try:
        # present from the first listing (the resync is an hour away): the job and lorarl_jobs
        wait_for(
            lambda: prom.query(f'lorarl_job_phase{{namespace="{namespace}", lorarljob="{NAME}", phase="Pending"}} == 1'), timeout=60, what="the job's phase"
        )
        assert prom.query('lorarl_jobs{phase="Pending"} >= 1')
        running(kube, namespace)  # KubeRay's steps, simulated
        # its head pod as the API server holds it once bound (no kubelet): the GPU-hours are counted from it
        node = api_node(kube, f"gpu-{namespace}")
        gpu_pod(kube, namespace, NAME, POD, node, scheduled=began - 60)
        log = generate_miles_log(num_rollouts=60, eval_interval=20, save_interval=20, save_dir=f"/root/shared_data/{NAME}/checkpoints")
        result = run_reporter(control_plane, kube, namespace, tmp_path, log)
        assert result.returncode == 0, result.stderr.decode()[-2000:]
        wait_for(lambda: prom.query(f'lorarl_job_rollout{{namespace="{namespace}", lorarljob="{NAME}"}} == 60'), timeout=60, what="rollout 60 in Prometheus")
        time.sleep(2)  # noqa: TID251 - two more scrapes of the final numbers (not an assertion of absence)
        status = job(kube, namespace)["status"]

        # every dashboard query returns data over the run
        now = time.time()
        empty = []
        for title, expr in dashboard_queries():
            series = prom.query(concrete(expr, namespace), "query_range", start=began, end=now, step=1)
            values = [v for s in series for _, v in s["values"] if v not in ("NaN", "+Inf", "-Inf")]
            if not values:
                empty.append(f"{title}: {concrete(expr, namespace)}")
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)
        # the numbers are the status's: reward, eval, GPU-hours, and the namespace's counter
        reward = prom.query(f'lorarl_job_reward{{namespace="{namespace}", lorarljob="{NAME}"}}')
        assert float(reward[0]["value"][1]) == status["metrics"]["rawReward"] == r4(log.raw_reward[log.last_rollout])
        evals = {s["metric"]["dataset"]: float(s["value"][1]) for s in prom.query(f'lorarl_job_eval_score{{namespace="{namespace}"}}')}
        assert evals == {e["name"]: e["latest"] for e in status["eval"]}
        hours = float(prom.query(f'lorarl_job_gpu_hours{{namespace="{namespace}"}}')[0]["value"][1])
        assert hours == status["progress"]["gpuHours"] > 0
        counted = float(prom.query(f'lorarl_namespace_gpu_hours_total{{namespace="{namespace}"}}')[0]["value"][1])
        assert 0 < counted <= hours  # created after the operator started: counted from its first report
        # the AMD series of the job's pods only (the other job's pod is left out)
        pods = {s["metric"]["pod"] for s in prom.query(concrete('avg by (pod) (gpu_gfx_activity{namespace="$namespace", pod=~"$lorarljob-.+"})', namespace))}
        assert pods == {POD}

        # lorarl plot: the PNG's curves are the log's (status.history holds them, decimated)
        history = status["history"]
        assert history["reward"] == [[r, r4(log.raw_reward[r])] for r in range(60)]  # 60 < 100 points: every rollout
        expected_evals = {}
        for rollout, scores in log.evals:
            for name, score in scores.items():
                expected_evals.setdefault(name, []).append([rollout, r4(score)])
        assert {e["name"]: e["points"] for e in history["eval"]} == expected_evals
        png = tmp_path / "curves.png"
        env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
        out = subprocess.run(
            [sys.executable, "-m", "lorarl.cli", "plot", NAME, "-n", namespace, "-o", str(png)], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert f"{png}: {2 + len(expected_evals)} curves of {namespace}/{NAME}" in out.stdout
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
        watch = subprocess.run(
            [sys.executable, "-m", "lorarl.cli", "watch", NAME, "-n", namespace, "--once"], capture_output=True, text=True, env=env, timeout=60
        )
        assert watch.returncode == 0 and "60/60 100%" in watch.stdout and "reward" in watch.stdout, watch.stdout + watch.stderr

        # the end of the run: the phase series moves to Succeeded
        from lorarl_dev.kuberay_sim import FakeKubeRay

        FakeKubeRay(kube, namespace, NAME).succeeded()
        wait_for(phase_is(kube, namespace, "Succeeded"), what="Succeeded")
        wait_for(lambda: prom.query(f'lorarl_job_phase{{namespace="{namespace}", phase="Succeeded"}} == 1'), timeout=60, what="Succeeded in Prometheus")
        if os.environ.get("LORARL_UPDATE_DOCS"):  # the pictures of docs/observability.md
            draw_dashboard_data(prom, namespace, began, time.time(), REPO / "docs" / "observability-dashboard.png")
            shutil.copy(png, REPO / "docs" / "observability-curves.png")
        else:
            draw_dashboard_data(prom, namespace, began, time.time(), tmp_path / "dashboard.png")
    finally:
        prom.stop()
        exporters.server.shutdown()
        operator.stop()
        control_plane.kubectl("delete", "node", f"gpu-{namespace}", "--ignore-not-found", check=False)
    operator.assert_no_tracebacks()
