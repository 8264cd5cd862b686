"""Helpers for the status reporter tests: the reporter modules, the shipped artifact, the
source-faithful miles fixtures (lorarl_dev.mileslog) and a fake API server.

Unit tests import the modules (``lorarl.reporter.*``); process tests run the zipapp the
renderer ships, with ``python -I -S`` (no site-packages), exactly as the training image would.
"""

from __future__ import annotations

import json
import math
import ssl
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from lorarl.job import artifact
from lorarl.reporter import attempts, checkpoints, kubeapi, launcher, logparse, rounding, summary
from lorarl_dev import mileslog
from lorarl_dev.mileslog import BASE_TIME, AttemptLog, attempt_log  # noqa: F401 (re-exported)

REPO = Path(__file__).resolve().parents[2]
SAVE_DIR = "/root/shared_data/260101-000000-000/checkpoints"


def load_reporter():
    """All reporter modules' public names in one namespace (tests read ``reporter.X``)."""
    ns = types.SimpleNamespace()
    for module in (rounding, logparse, checkpoints, attempts, launcher, summary, kubeapi):
        for name in dir(module):
            if not name.startswith("_"):
                setattr(ns, name, getattr(module, name))
    return ns


def write_artifact(directory: Path) -> Path:
    path = directory / "reporter.pyz"
    path.write_bytes(artifact.reporter_zipapp())
    return path


# Prints the file given as argv[1] byte for byte, splitting some lines across writes (with a
# flush and a pause in between) and pausing now and then, then exits with argv[2].
CHILD = r"""
import sys, time
data = open(sys.argv[1], "rb").read()
out = sys.stdout.buffer
for i, line in enumerate(data.splitlines(keepends=True)):
    if i % 25 == 0 and len(line) > 4:
        cut = len(line) // 2
        out.write(line[:cut]); out.flush(); time.sleep(0.003)
        out.write(line[cut:])
    else:
        out.write(line)
    if i % 10 == 0:
        out.flush()
    if i % 100 == 99:
        time.sleep(0.05)
out.flush()
sys.exit(int(sys.argv[2]))
"""


def generate_miles_log(
    num_rollouts: int = 300, eval_interval: int = 20, save_interval: int = 50, seed: int = 20261130, save_dir: str = SAVE_DIR, **kw
) -> AttemptLog:
    return mileslog.attempt_log(num_rollouts, save_dir=save_dir, eval_interval=eval_interval, save_interval=save_interval, seed=seed, **kw)


def r4(value: float) -> float:
    """4 significant digits, written independently of the reporter's rounding module."""
    return float(f"{value:.4g}")


def expected_final_status(
    log: AttemptLog, *, offset: int = 0, total: int | None = None, complete_saves: list | None = None, attempt: int = 1, trained_before: int = 0
) -> dict:
    """The owned status after ``log`` (one attempt that resumed after ``offset`` rollouts),
    computed from the generator's own values (no lastUpdateTime, no gpuHours)."""
    total = log.num_rollouts + offset if total is None else total
    last = log.last_rollout
    last_step = max(log.loss)
    metrics = {
        "step": last_step + offset * (len(log.loss) // max(1, len(log.raw_reward))),
        "rawReward": r4(log.raw_reward[last]),
        "loss": r4(log.loss[last_step]),
        "responseLengthMean": r4(log.response_len[last]),
        "truncatedRatio": r4(log.truncated[last]),
    }
    for key, value in (("kl", log.kl[last_step]), ("trainRolloutLogprobAbsDiff", log.diff[last_step])):
        if math.isfinite(value):
            metrics[key] = r4(value)
    diffs = [v for v in log.diff.values() if math.isfinite(v)]
    metrics["trainRolloutLogprobAbsDiffMean"] = r4(math.fsum(diffs) / len(diffs))
    evals = {}
    for rollout, scores in log.evals:
        rollout += offset
        for name, score in scores.items():
            e = evals.setdefault(name, {"name": name, "latest": score, "latestRollout": rollout, "best": score, "bestRollout": rollout})
            e["latest"], e["latestRollout"] = score, rollout
            if score > e["best"]:
                e["best"], e["bestRollout"] = score, rollout
    saves = [s + offset for s in log.saves] if complete_saves is None else complete_saves
    done = min(total, last + 1 + offset)
    status = {
        "progress": {"rollout": done, "total": total, "percent": done * 100 // total, "attempts": attempt, "trainedRollouts": trained_before + done - offset},
        "metrics": metrics,
        "eval": [evals[k] for k in sorted(evals)],
    }
    if done >= total:
        status["progress"]["etaSeconds"] = 0
    if saves:
        status["checkpoints"] = {"latestIteration": max(saves), "count": len(set(saves))}
    steps_per_rollout = max(1, len(log.loss) // max(1, len(log.raw_reward)))
    diffs_by_rollout = {}
    for step in sorted(log.diff):
        if math.isfinite(log.diff[step]):
            diffs_by_rollout[(step + offset * steps_per_rollout) // steps_per_rollout] = r4(log.diff[step])
    history = {"reward": decimated({r + offset: r4(v) for r, v in log.raw_reward.items()}), "logprobAbsDiff": decimated(diffs_by_rollout)}
    curves = {}
    for rollout, scores in log.evals:
        for name, score in scores.items():
            curves.setdefault(name, {})[rollout + offset] = r4(score)
    if curves:
        history["eval"] = [{"name": n, "points": decimated(curves[n])} for n in sorted(curves)]
    status["history"] = history
    return status


def decimated(points: dict, limit: int = 100) -> list:
    """What status.history keeps of a curve: the points on the coarsest power-of-two grid of
    rollouts holding at most ``limit`` of them, and the newest point (docs/observability.md)."""
    stride = 1
    while sum(1 for r in points if r % stride == 0) > limit:
        stride *= 2
    kept = [[r, points[r]] for r in sorted(points) if r % stride == 0]
    newest = max(points, default=None)
    if newest is not None and (not kept or kept[-1][0] != newest):
        kept.append([newest, points[newest]])
    return kept


def without_time(status: dict) -> dict:
    """The status minus what depends on the wall clock (and the path, checked on its own)."""
    status = json.loads(json.dumps(status))
    status["progress"].pop("lastUpdateTime", None)
    status["progress"].pop("gpuHours", None)
    status.get("checkpoints", {}).pop("latestPath", None)
    status.pop("tracking", None)
    return status


def strip_nulls(value):
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# A fake Kubernetes API server that records merge patches
# --------------------------------------------------------------------------------------------


class FakeApi:
    def __init__(self, tls: tuple | None = None):  # tls: (cert file, key file)
        self.records = []  # dicts: method, path, headers, body
        self.statuses = []  # HTTP codes to answer with, consumed first-in first-out (then 200)
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_PATCH(self):  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with api.lock:
                    api.records.append(
                        {"method": "PATCH", "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": json.loads(body)}
                    )
                    code = api.statuses.pop(0) if api.statuses else 200
                payload = b'{"kind":"Status","message":"injected failure"}' if code >= 400 else b"{}"
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def patches(self):
        with self.lock:
            return list(self.records)


# A stand-in for `python3 train.py ARGS` on the LoRA path (it reads the flags the launcher
# rewrites): prints the source-faithful log of --num-rollout rollouts with ids from 0 and writes
# each save into --save as it logs it. FAKE_CRASH_AFTER=r: dies (exit 1) after rollout r;
# FAKE_TORN=1: the save of rollout r is left half-written (shards and HF files, 2 states).
FAKE_TRAINER = r"""
import os, re, sys
from lorarl_dev import mileslog
args = sys.argv[1:]
flag = lambda name: args[args.index(name) + 1] if name in args else None
num, save, adapter = int(flag("--num-rollout")), flag("--save"), flag("--lora-adapter-path")
ranks = int(os.environ.get("FAKE_RANKS", "8"))
crash = int(os.environ.get("FAKE_CRASH_AFTER", "-1"))
resumed = (adapter, int(re.search(r"iter_(\d+)", adapter).group(1))) if adapter else None
log = mileslog.attempt_log(num, save_dir=save, eval_interval=20, save_interval=int(flag("--save-interval")),
                           ranks=ranks, noise=False, resumed_from=resumed, stop_after=crash if crash >= 0 else None,
                           die_saving=os.environ.get("FAKE_TORN") == "1",
                           wandb_url=os.environ.get("FAKE_WANDB_URL"), seed=num)
out = sys.stdout.buffer
for line in log.lines:
    m = re.search(rb"actor_cell0_rank0\] checkpoint.py:160 - Saving LoRA checkpoint to \S*iter_(\d+)", line)
    if m:
        it = int(m.group(1))
        torn = it == crash and os.environ.get("FAKE_TORN") == "1"
        mileslog.write_save(save, it, ranks, files=ranks + 2 + 2 if torn else None, torn_last=torn)
    out.write(line)
    out.flush()
sys.exit(1 if crash >= 0 else 0)
"""


def trainer_command(save_dir: str, total: int = 100, save_interval: int = 20) -> list:
    """The rendered train.py flags the launcher rewrites, on the stand-in trainer."""
    import sys

    return [sys.executable, "-c", FAKE_TRAINER, "--save", save_dir, "--save-interval", str(save_interval), "--num-rollout", str(total)]
