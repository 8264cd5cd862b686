"""Helpers for the status reporter tests: load the script, generate a miles log, fake the API.

The reporter is a standalone script shipped in a ConfigMap, so it is imported from its path
(never as part of the lorarl package) and also run as a subprocess.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import ssl
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REPORTER_PATH = REPO / "operator" / "lorarl" / "assets" / "reporter.py"


def load_reporter():
    spec = importlib.util.spec_from_file_location("lorarl_status_reporter", REPORTER_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses/NamedTuple need the module registered
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------
# A realistic miles log
# --------------------------------------------------------------------------------------------

BASE_TIME = datetime(2026, 11, 30, 8, 30, 0, tzinfo=timezone.utc)
TRAIN_PREFIX = "\x1b[36m(MegatronTrainRayActor pid=1234, ip=10.0.0.5)\x1b[0m "
ROLLOUT_PREFIX = "\x1b[33m(RolloutManager pid=812, ip=10.0.0.5)\x1b[0m "
SGLANG_PREFIX = "\x1b[32m(SGLangEngine pid=2222, ip=10.0.0.5)\x1b[0m "
SAVE_DIR = "/root/shared_data/260101-000000-000/checkpoints"


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


@dataclass
class MilesLog:
    """A generated log plus the values it was generated from (the ground truth)."""

    num_rollouts: int
    save_dir: str
    lines: list = field(default_factory=list)  # bytes, each with its line ending
    line_times: list = field(default_factory=list)  # seconds since BASE_TIME, per line
    raw_reward: dict = field(default_factory=dict)  # rollout -> value
    response_len: dict = field(default_factory=dict)
    truncated: dict = field(default_factory=dict)
    loss: dict = field(default_factory=dict)  # step -> value
    kl: dict = field(default_factory=dict)
    diff: dict = field(default_factory=dict)
    step_line: dict = field(default_factory=dict)  # step -> index into lines
    evals: list = field(default_factory=list)  # (rollout, {name: score})
    checkpoints: list = field(default_factory=list)  # iterations

    @property
    def data(self) -> bytes:
        return b"".join(self.lines)


def _stamp(seconds: float) -> str:
    t = BASE_TIME + timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def generate_miles_log(num_rollouts: int = 300, eval_interval: int = 20, save_interval: int = 50,
                       seed: int = 20261130, save_dir: str = SAVE_DIR) -> MilesLog:
    rng = random.Random(seed)
    log = MilesLog(num_rollouts=num_rollouts, save_dir=save_dir)
    clock = [0.0]

    def emit(text="", *, prefix: str = "", raw: bytes | None = None, end: bytes = b"\n"):
        line = raw if raw is not None else (prefix + text).encode("utf-8")
        log.lines.append(line + end)
        log.line_times.append(clock[0])

    def logline(proc, where, message, prefix=""):
        emit(f"[{_stamp(clock[0])} {proc}] {where} - {message}", prefix=prefix)

    def noise():
        choice = rng.randrange(9)
        if choice == 0:
            emit(f"[{_stamp(clock[0])}] Decode batch. #running-req: {rng.randint(1, 64)}, #token: "
                 f"{rng.randint(1000, 90000)}, token usage: {rng.random():.2f}, gen throughput "
                 f"(token/s): {rng.uniform(100, 5000):.2f}, #queue-req: 0", prefix=SGLANG_PREFIX)
        elif choice == 1:
            done = rng.randint(1, 64)
            emit(f"Rollout generation: {done * 100 // 64:3d}%|\u2588\u2588\u258c   | {done}/64 "
                 f"[00:12<00:15,  2.31it/s]", end=b"\r")
        elif choice == 2:
            emit("Traceback (most recent call last):")
            emit('  File "/root/miles/miles/utils/misc.py", line 88, in <module>')
            emit("    step 999: {'train/loss': 123.0, 'train/ppo_kl': 9.0}")
            emit("ValueError: rollout 999: {'rollout/raw_reward': -5.0}")
        elif choice == 3:
            emit(f"step {rng.randint(0, 9)}: {{'foo': 1, 'bar': 2}}")  # wrong key family
        elif choice == 4:
            emit(raw=b"\xff\xfe binary \x00 noise \xc3\x28 (not utf-8)")
        elif choice == 5:
            emit("wandb: \x1b[33mWARNING\x1b[0m Step only supports monotonically increasing values")
        elif choice == 6:
            emit("critic-step 3: {'train/critic-loss': 7.0}", prefix=TRAIN_PREFIX)
        elif choice == 7:
            emit("")
        else:
            logline("MegatronTrainRayActor", "actor.py:321", f"Timer train end (elapsed: {rng.random():.3f}s)",
                    prefix=TRAIN_PREFIX)

    def extra_keys(family: str, n: int) -> dict:
        return {f"{family}/extra_{i}": round(rng.uniform(-10, 1000), 6) for i in range(n)}

    def fmt(d: dict, numpy_style: bool = False) -> str:
        if not numpy_style:
            return repr(d)
        parts = []
        for k, v in d.items():
            if isinstance(v, float) and math.isfinite(v):
                parts.append(f"{k!r}: np.float64({v!r})")
            else:
                parts.append(f"{k!r}: {v!r}")
        return "{" + ", ".join(parts) + "}"

    def add_eval(rollout: int):
        aime = round(min(1.0, 0.55 + 0.0004 * rollout + rng.uniform(-0.05, 0.05)), 4)
        math500 = round(min(1.0, 0.70 + 0.0003 * rollout + rng.uniform(-0.04, 0.04)), 4)
        log.evals.append((rollout, {"aime24": aime, "math-500": math500}))
        d = {"eval/aime24": aime, "eval/aime24-truncated_ratio": rng.random() / 10,
             "eval/aime24/response_len/mean": rng.uniform(3000, 9000), "eval/aime24-pass@16": rng.random(),
             "eval/math-500": math500, "eval/math-500-truncated_ratio": rng.random() / 20}
        logline("RolloutManager", "rollout.py:412", f"eval {rollout}: {d}", prefix=ROLLOUT_PREFIX)

    # startup chatter and the pre-training eval
    emit("2026-11-30 08:29:58,001\tINFO worker.py:1832 -- Connected to Ray cluster.")
    logline("train.py", "arguments.py:1500", "num_rollout=%d, save_interval=%d" % (num_rollouts, save_interval))
    add_eval(0)

    for r in range(num_rollouts):
        clock[0] = 60.0 * r + 5.0
        for _ in range(rng.randint(1, 4)):
            noise()
        resp, trunc = round(rng.uniform(1500, 8000), 3), round(rng.random() / 4, 5)
        log.response_len[r], log.truncated[r] = resp, trunc
        perf = {"rollout/response_len/mean": resp, "rollout/response_len/median": resp * 0.9,
                "rollout/zero_std/count_0.0": rng.randint(0, 4), "rollout/repetition_frac": rng.random(),
                "rollout/truncated_ratio": trunc, "perf/rollout_time": rng.uniform(100, 300),
                **extra_keys("perf", 40)}
        logline("RolloutManager", "rollout.py:530", f"perf {r}: {perf}", prefix=ROLLOUT_PREFIX)
        clock[0] += 20.0
        reward = round(rng.uniform(-1, 1), 6)
        log.raw_reward[r] = reward
        rollout = {"rollout/log_probs": -rng.random(), "rollout/rollout_log_probs": -rng.random(),
                   "rollout/raw_reward": reward, "rollout/rewards": rng.random(),
                   "rollout/advantages_hist": [rng.randint(0, 9) for _ in range(8)],
                   "rollout/meta": {"engine": "sglang", "tp": 1}, **extra_keys("rollout", 30)}
        logline("MegatronTrainRayActor", "data.py:218", f"rollout {r}: {fmt(rollout, numpy_style=r % 7 == 3)}",
                prefix=TRAIN_PREFIX)
        clock[0] += 25.0
        loss, kl, diff = round(rng.uniform(-0.1, 0.1), 6), round(rng.random() / 1000, 8), round(rng.uniform(0.005, 0.02), 6)
        if r == 37:
            diff = float("nan")
        if r == num_rollouts - 1:
            kl = float("nan")
        log.loss[r], log.kl[r], log.diff[r] = loss, kl, diff
        step = {"train/loss": loss, "train/pg_loss": loss, "train/entropy_loss": rng.random(),
                "train/pg_clipfrac": rng.random() / 100, "train/ppo_kl": kl,
                "train/train_rollout_logprob_abs_diff": diff, "train/train_rollout_kl": rng.random() / 1000,
                "train/grad_norm": float("nan") if r % 11 == 5 else rng.random(),
                "train/lr-pg_0": 2e-05, "train/step": r}
        text = repr(step)
        if r % 13 == 4:  # bare inf/nan make ast.literal_eval fail: the regex fallback must cope
            text = text[:-1] + ", 'train/weird': inf, 'train/weirder': -inf, 'train/odd': nan}"
        log.step_line[r] = len(log.lines)
        logline("MegatronTrainRayActor", "model.py:660", f"step {r}: {text}", prefix=TRAIN_PREFIX)
        train_perf = {"perf/actor_train_time": rng.uniform(20, 40), "perf/log_probs_time": rng.random() * 5,
                      "perf/train_wait_time": rng.random(), "perf/step_time": rng.uniform(40, 80)}
        logline("MegatronTrainRayActor", "train_utils.py:102", f"perf {r}: {train_perf}", prefix=TRAIN_PREFIX)
        if (r + 1) % save_interval == 0 or r == num_rollouts - 1:
            clock[0] += 5.0
            emit(f"saving checkpoint at iteration {r:7d} to {save_dir} in torch_dist format", prefix=TRAIN_PREFIX)
            emit(f"  successfully saved checkpoint from iteration {r:7d} to {save_dir} [ t 1/1, p 1/1 ]",
                 prefix=TRAIN_PREFIX)
            log.checkpoints.append(r)
        if (r + 1) % eval_interval == 0 or r == num_rollouts - 1:
            clock[0] += 5.0
            add_eval(r)
        if rng.random() < 0.2:
            noise()
    emit("Job 'raysubmit_abc' succeeded", end=b"\r\n")
    return log


def expected_final_status(log: MilesLog) -> dict:
    """The final owned status, computed from the generator's own values (no lastUpdateTime)."""
    n = log.num_rollouts
    last = n - 1
    metrics = {"step": last, "rawReward": log.raw_reward[last], "loss": log.loss[last],
               "responseLengthMean": log.response_len[last], "truncatedRatio": log.truncated[last]}
    for key, value in (("kl", log.kl[last]), ("trainRolloutLogprobAbsDiff", log.diff[last])):
        if math.isfinite(value):
            metrics[key] = value
    diffs = [v for v in log.diff.values() if math.isfinite(v)]
    metrics["trainRolloutLogprobAbsDiffMean"] = math.fsum(diffs) / len(diffs)
    evals = {}
    for rollout, scores in log.evals:
        for name, score in scores.items():
            e = evals.setdefault(name, {"name": name, "latest": score, "latestRollout": rollout,
                                        "best": score, "bestRollout": rollout})
            e["latest"], e["latestRollout"] = score, rollout
            if score > e["best"]:
                e["best"], e["bestRollout"] = score, rollout
    latest_ckpt = max(log.checkpoints)
    return {
        "progress": {"rollout": n, "total": n, "percent": 100, "etaSeconds": 0},
        "metrics": metrics,
        "eval": [evals[k] for k in sorted(evals)],
        "checkpoints": {"latestIteration": latest_ckpt, "latestPath": f"{log.save_dir}/iter_{latest_ckpt:07d}",
                        "count": len(log.checkpoints)},
    }


def without_time(status: dict) -> dict:
    status = json.loads(json.dumps(status))
    status["progress"].pop("lastUpdateTime", None)
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
                    api.records.append({"method": "PATCH", "path": self.path,
                                        "headers": {k.lower(): v for k, v in self.headers.items()},
                                        "body": json.loads(body)})
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
