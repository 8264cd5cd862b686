#!/usr/bin/env python3
"""lorarl status reporter: run the miles trainer, pass its output through, report progress.

Standard library only (Python 3.10+): this file is shipped to the Ray head pod in a ConfigMap
(mounted at /opt/lorarl/reporter.py) and runs inside the training image, which has none of the
lorarl packages.

Usage::

    python3 reporter.py --namespace NS --name JOB --total-rollouts 100 \\
        [--save-dir DIR] [--interval 15] [--resume] -- python3 /root/miles/train.py ARGS...

With ``--resume`` (and ``--save-dir``) the newest complete checkpoint's adapter is appended to
the command as ``--lora-adapter-path <save>/iter_NNNNNNN/adapter`` (miles then continues at
iteration + 1); with no checkpoint the command runs unchanged.

What it does
============
* Runs the command after ``--`` as a child process. Every byte the child writes to stdout is
  written, unchanged and unbuffered, to our stdout, and every byte of its stderr to our stderr
  (binary-safe; a partial line is passed on at once and parsed when its newline arrives).
* Exits with the child's exit code; a child killed by signal N gives 128+N, like a shell.
  SIGTERM, SIGINT and SIGHUP sent to the reporter are forwarded to the child (the child stays in
  our process group, so a signal sent to the whole group reaches it twice; both are harmless for
  the trainer). A command that cannot be started gives 127 (126 when not executable).
* Parses miles log lines (below) into events, folds them into a status summary (`Summary`) and
  sends it as a JSON merge patch to ``/apis/lorarl.dev/v1alpha1/namespaces/NS/lorarljobs/JOB/status``
  from a background thread: at most one patch per ``--interval`` seconds and only when the
  summary changed, plus one final patch after the child exits (bounded to about 10 s in total).
  A slow or unreachable API server never slows the output. Reporting problems never change the
  exit code: they produce one ``[lorarl-reporter]`` line on stderr at the first failure and one
  on recovery. Bad reporter options (with a command present) disable reporting, not the run.

Lines it understands
====================
miles logs with Python logging, ``[YYYY-MM-DD HH:MM:SS.mmm <proc>] <file>.py:<line> - <message>``.
Lines from Ray actors carry a prefix such as ``(MegatronTrainRayActor pid=1234, ip=10.0.0.5) ``;
ANSI colour codes are stripped first; Ray's `` [repeated 3x across cluster]`` suffix is ignored.
The message must start right after the header (or prefix, or at the start of the line), so an
indented copy inside a traceback is not taken for a real one. Messages::

    perf <rollout_id>: {...}     rollout stats ('rollout/response_len/mean',
                                 'rollout/truncated_ratio', 'perf/rollout_time', ...); a second
                                 perf line for the same id, without 'rollout/' keys, carries
                                 train timings and is printed after that rollout's training.
    rollout <rollout_id>: {...}  printed by the train actor *before* it trains the rollout
                                 ('rollout/raw_reward', 'rollout/log_probs', ...).
    step <n>: {...}              one per optimizer step ('train/loss', 'train/ppo_kl',
                                 'train/train_rollout_logprob_abs_diff', 'train/step', ...);
                                 n is the accumulated step id (== rollout id with one step per
                                 rollout). 'critic-step' lines are ignored.
    eval <rollout_id>: {...}     'eval/<dataset>' scores, plus 'eval/<dataset>-truncated_ratio',
                                 'eval/<dataset>-pass@k', 'eval/<dataset>/<stat>', ...
    ... successfully saved checkpoint from iteration <N> to <SAVE_DIR>   (Megatron; N padded)

A message is only accepted when its dict has a key of the expected family ('perf/' or
'rollout/' for perf, 'rollout/' for rollout, 'train/' for step, 'eval/' for eval). Dicts are
read with ``ast.literal_eval``; if that fails (numpy reprs such as ``np.float64(0.5)``, bare
``nan``/``inf``, truncation) a regex picks up every ``'key': number`` pair instead. Only
numeric values are kept; NaN and infinities are kept in the summary state but never sent.

When a rollout counts as finished
=================================
``progress.rollout`` is the number of finished rollouts, i.e. the highest finished rollout id
+ 1 (ids run 0..num_rollout-1). Rollout r is finished when:

* a ``step`` line arrives while r is the rollout being trained (the id of the latest
  ``rollout`` line); without any ``rollout`` line so far, ``step n`` finishes rollout n;
* the train-timings ``perf r`` line arrives (it follows the last step of r);
* as a fallback when step lines are missing, ``rollout r+1`` arrives: the train actor prints it
  when it starts rollout r+1, so r is done. (``rollout r`` itself is printed *before* r is
  trained, so it does not finish r.)
* A checkpoint of iteration N (miles saves with iteration == rollout id) proves N finished; this
  makes a resumed run show its progress from the first patch.

``etaSeconds`` = (wall time between the first and the latest observed finish) / (rollouts
between them) * (rollouts left): absent until two different rollouts were seen finishing, 0
when all are done. Eval ``best`` is the maximum score (higher is better) and ``bestRollout``
its earliest rollout id. A score key is ``eval/<name>`` with no further ``/`` and not
``eval/step``; ``eval/<name>-<suffix>`` is dropped when ``eval/<name>`` is in the same dict,
so hyphenated dataset names such as ``eval/math-500`` still count.

Checkpoints: with ``--save-dir`` the directory is scanned every interval (in the background
thread) and is the truth: ``iter_NNNNNNN`` directories up to the newest iteration recorded in
``latest_checkpointed_iteration.txt`` or announced by a log line count as complete (a directory
beyond both is a save in progress). Iterations announced by the log but newer than anything
the last scan saw are counted too (the scan lags). Without ``--save-dir`` the log lines alone
are used. ``latestPath`` is ``<save>/iter_NNNNNNN``.

Status sent (the reporter owns only these four fields; the operator owns the rest)::

    status:
      progress:    {rollout: int, total: int, percent: int 0-100, etaSeconds: int,
                    lastUpdateTime: "2026-11-30T08:30:00Z"}
      metrics:     {step: int, rawReward, trainRolloutLogprobAbsDiff,
                    trainRolloutLogprobAbsDiffMean, kl, loss, responseLengthMean,
                    truncatedRatio: float}
      eval:        [{name, latest, latestRollout, best, bestRollout}, ...]  sorted by name
      checkpoints: {latestIteration: int, latestPath: str, count: int}

Keys not yet known are left out of ``Summary.status()``. In the merge patch itself
``progress.etaSeconds`` and every ``metrics`` key that is unknown (or whose latest value is
NaN/inf) are sent as ``null``, which deletes any stale value left by an earlier attempt;
``eval`` and ``checkpoints`` are only sent once known. ``lastUpdateTime`` is when the summary
last changed. ``trainRolloutLogprobAbsDiffMean`` is the mean over all distinct steps with a
finite value.

API access (urllib only): in-cluster by default (``KUBERNETES_SERVICE_HOST``/``_PORT``, the
service-account token re-read before every patch because it rotates, and its ``ca.crt``);
``LORARL_API_SERVER`` (``https://`` or, for tests, ``http://``), ``LORARL_TOKEN_FILE`` and
``LORARL_CA_FILE`` override them. Proxies from the environment are not used. The token is never
printed.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import math
import os
import re
import select
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from datetime import datetime, timezone
from typing import Callable, NamedTuple, Optional

PREFIX = "[lorarl-reporter]"
GROUP, VERSION, PLURAL = "lorarl.dev", "v1alpha1", "lorarljobs"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
REQUEST_TIMEOUT = 5.0  # seconds per HTTP request
FINAL_TIMEOUT = 10.0  # seconds for everything after the child exited
MAX_LINE = 8 << 20  # longer lines are passed through but not parsed
MAX_LITERAL = 1 << 20  # longer dict reprs skip ast.literal_eval

# status key -> source metric key ('latest value' metrics)
METRIC_SOURCES = (
    ("rawReward", "rollout/raw_reward"),
    ("trainRolloutLogprobAbsDiff", "train/train_rollout_logprob_abs_diff"),
    ("kl", "train/ppo_kl"),
    ("loss", "train/loss"),
    ("responseLengthMean", "rollout/response_len/mean"),
    ("truncatedRatio", "rollout/truncated_ratio"),
)
DIFF_KEY = "train/train_rollout_logprob_abs_diff"
METRIC_FIELDS = ("step",) + tuple(k for k, _ in METRIC_SOURCES) + ("trainRolloutLogprobAbsDiffMean",)
OWNED_FIELDS = ("progress", "metrics", "eval", "checkpoints")


def warn(message: str) -> None:
    """One concise line on stderr; never raises."""
    try:
        os.write(2, f"{PREFIX} {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


class Event(NamedTuple):
    kind: str  # perf | rollout | step | eval | checkpoint
    id: int  # rollout id, step number, or checkpoint iteration
    values: dict  # metric key -> float (may be nan/inf); empty for checkpoints
    path: Optional[str] = None  # checkpoint save directory from the log line


_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_RAY_PREFIX_RE = re.compile(r"\((?:[^()\n]|\([^()\n]{0,100}\)){1,300}\) ")
_LOG_HEADER_RE = re.compile(r"\[[^\]\n]{0,200}\d\d:\d\d:\d\d[^\]\n]{0,200}\] \S+:\d+ - ")
_MESSAGE_RE = re.compile(r"(perf|rollout|step|eval) (\d+): (\{.*)")
_CKPT_RE = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)(?:\s+to\s+(\S+))?")
_PAIR_RE = re.compile(
    r"""(?P<q>['"])(?P<key>[^'"\\\n]+)(?P=q)\s*:\s*"""
    r"""(?:[A-Za-z_][\w.]*\(\s*)?"""  # np.float64( / tensor( / float(
    r"""(?P<num>[-+]?(?:nan|inf(?:inity)?|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))(?![\w.])""",
    re.IGNORECASE,
)
_LITERAL_LOCK = threading.Lock()  # warnings.catch_warnings is process-global
_FAMILIES = {"perf": ("perf/", "rollout/"), "rollout": ("rollout/",), "step": ("train/",), "eval": ("eval/",)}


def _number(value) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except (OverflowError, ValueError):
        return math.inf if value > 0 else -math.inf


def parse_metrics(text: str) -> dict:
    """Numeric top-level values of a Python dict repr; a regex fallback for anything odd."""
    if len(text) <= MAX_LITERAL:
        try:
            # literal_eval warns about invalid escapes ('\\p'); such warnings must not reach the output
            with _LITERAL_LOCK, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = ast.literal_eval(text)
        except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError, ...
            obj = None
        if isinstance(obj, dict):
            out = {}
            for key, value in obj.items():
                number = _number(value)
                if isinstance(key, str) and number is not None:
                    out[key] = number
            return out
    out = {}
    for m in _PAIR_RE.finditer(text):
        try:
            out[m.group("key")] = float(m.group("num"))
        except ValueError:
            pass
    return out


def clean_line(line) -> str:
    if isinstance(line, (bytes, bytearray)):
        line = bytes(line).decode("utf-8", "replace")
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    return line.rstrip("\r\n")


def parse_line(line) -> Optional[Event]:
    """One log line (str or bytes) -> Event, or None for anything else. Never raises."""
    try:
        return _parse_line(clean_line(line))
    except Exception:
        return None


def _parse_line(line: str) -> Optional[Event]:
    if "successfully saved checkpoint" in line:
        m = _CKPT_RE.search(line)
        if m:
            return Event("checkpoint", int(m.group(1)), {}, m.group(2))
    if ": {" not in line:
        return None
    pos = 0
    m = _RAY_PREFIX_RE.match(line, pos)
    if m:
        pos = m.end()
    m = _LOG_HEADER_RE.match(line, pos)
    if m:
        pos = m.end()
    m = _MESSAGE_RE.match(line, pos)
    if not m:
        return None
    kind, body = m.group(1), m.group(3)
    end = body.rfind("}")
    if end >= 0:  # drop trailing text such as Ray's " [repeated 3x across cluster]"
        body = body[: end + 1]
    values = parse_metrics(body)
    families = _FAMILIES[kind]
    if not any(key.startswith(families) for key in values):
        return None
    return Event(kind, int(m.group(2)), values)


def eval_scores(values: dict) -> dict:
    """The plain 'eval/<name>' scores of an eval dict (see module docstring)."""
    plain = {}
    for key, value in values.items():
        if key.startswith("eval/"):
            name = key[5:]
            if name and "/" not in name and name != "step":
                plain[name] = value
    return {n: v for n, v in plain.items() if not any(n.startswith(o + "-") for o in plain if o != n)}


# --------------------------------------------------------------------------------------------
# Checkpoint directory scan
# --------------------------------------------------------------------------------------------


class CheckpointScan(NamedTuple):
    save_dir: str
    iterations: dict  # iteration -> directory path
    tracker: Optional[int]  # latest_checkpointed_iteration.txt


_ITER_DIR_RE = re.compile(r"iter_(\d+)")


def scan_save_dir(save_dir: str) -> Optional[CheckpointScan]:
    """Read a Megatron save directory; None when it cannot be listed (e.g. not created yet)."""
    try:
        iterations = {}
        with os.scandir(save_dir) as entries:
            for entry in entries:
                m = _ITER_DIR_RE.fullmatch(entry.name)
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if m and is_dir:
                    iterations[int(m.group(1))] = os.path.join(save_dir, entry.name)
    except OSError:
        return None
    tracker = None
    try:
        with open(os.path.join(save_dir, "latest_checkpointed_iteration.txt"), encoding="utf-8") as f:
            tracker = int(f.read(100).strip())
    except (OSError, ValueError):
        pass
    return CheckpointScan(save_dir, iterations, tracker)


def resume_adapter(save_dir: str) -> Optional[str]:
    """The adapter of the newest *complete* checkpoint, or None. Megatron writes
    latest_checkpointed_iteration.txt after a save completes, so it names the newest complete
    iteration; without it, the newest iter_* whose adapter has an adapter_config.json counts."""
    scan = scan_save_dir(save_dir)
    if scan is None:
        return None
    candidates = sorted(scan.iterations, reverse=True)
    if scan.tracker is not None:
        candidates = [i for i in candidates if i <= scan.tracker]
    for iteration in candidates:
        adapter = os.path.join(scan.iterations[iteration], "adapter")
        if scan.tracker is not None and iteration == scan.tracker and os.path.isdir(adapter):
            return adapter
        if os.path.isfile(os.path.join(adapter, "adapter_config.json")):
            return adapter
    return None


def _checkpoint_path(logged_dir: Optional[str], save_dir: Optional[str], iteration: int) -> str:
    name = f"iter_{iteration:07d}"
    base = logged_dir or save_dir
    if not base:
        return name
    if _ITER_DIR_RE.fullmatch(os.path.basename(base.rstrip("/"))):
        return base
    return os.path.join(base, name)


# --------------------------------------------------------------------------------------------
# Summary: events -> status (pure apart from the injected clock)
# --------------------------------------------------------------------------------------------


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


class Summary:
    """Folds events into the owned status fields. Not thread-safe; callers hold a lock."""

    def __init__(self, total_rollouts: int, save_dir: Optional[str] = None,
                 clock: Callable[[], float] = time.time):
        self.total = max(0, int(total_rollouts))
        self.save_dir = save_dir
        self._clock = clock
        self._finished = -1  # highest finished rollout id
        self._first: Optional[tuple] = None  # (time, rollout id) of the first observed finish
        self._last: Optional[tuple] = None  # (time, rollout id) of the latest
        self._training: Optional[int] = None  # rollout id of the latest 'rollout' line
        self._step: Optional[int] = None
        self._metrics: dict = {}  # status key -> latest float (may be nan)
        self._diffs: dict = {}  # step -> finite train_rollout_logprob_abs_diff
        self._evals: dict = {}  # name -> entry dict
        self._logged_ckpts: dict = {}  # iteration -> save dir from the log line (or None)
        self._scan: Optional[CheckpointScan] = None
        self.version = 1
        self._updated = clock()
        self._core = self._compute()

    # ---- folding
    def apply(self, event: Event) -> bool:
        """Fold one event; True when the status changed."""
        kind = event.kind
        if kind == "checkpoint":
            self._logged_ckpts[event.id] = event.path
        elif kind == "eval":
            self._fold_eval(event.id, event.values)
        else:
            for field, source in METRIC_SOURCES:
                if source in event.values:
                    self._metrics[field] = event.values[source]
            if kind == "rollout":
                self._training = event.id
                self._finish(event.id - 1)
            elif kind == "step":
                self._step = event.id
                diff = event.values.get(DIFF_KEY)
                if _finite(diff):
                    self._diffs[event.id] = diff
                self._finish(self._training if self._training is not None else event.id)
            elif kind == "perf" and not any(k.startswith("rollout/") for k in event.values):
                self._finish(event.id)
        return self._refresh()

    def apply_scan(self, scan: Optional[CheckpointScan]) -> bool:
        if scan is None:  # keep the last good scan over a transient error
            return False
        self._scan = scan
        return self._refresh()

    def _finish(self, rollout: Optional[int]) -> None:
        if rollout is None or rollout < 0 or rollout <= self._finished:
            return
        self._finished = rollout
        now = self._clock()
        if self._first is None:
            self._first = (now, rollout)
        self._last = (now, rollout)

    def _fold_eval(self, rollout: int, values: dict) -> None:
        for name, score in eval_scores(values).items():
            if not _finite(score):
                continue
            entry = self._evals.get(name)
            if entry is None:
                self._evals[name] = {"name": name, "latest": score, "latestRollout": rollout,
                                     "best": score, "bestRollout": rollout}
                continue
            if rollout >= entry["latestRollout"]:
                entry["latest"], entry["latestRollout"] = score, rollout
            if score > entry["best"] or (score == entry["best"] and rollout < entry["bestRollout"]):
                entry["best"], entry["bestRollout"] = score, rollout

    def _refresh(self) -> bool:
        core = self._compute()
        if core == self._core:
            return False
        self._core = core
        self.version += 1
        self._updated = self._clock()
        return True

    # ---- status
    def _checkpoints(self) -> Optional[dict]:
        logged, scan = self._logged_ckpts, self._scan
        found = {}  # iteration -> path
        if scan is not None and (scan.iterations or scan.tracker is not None):
            bounds = [b for b in (scan.tracker, max(logged, default=None)) if b is not None]
            bound = max(bounds) if bounds else None
            for iteration, path in scan.iterations.items():
                if bound is None or iteration <= bound:
                    found[iteration] = path
            newest_scanned = max(scan.iterations, default=-1)
            for iteration, path in logged.items():
                if iteration > newest_scanned:
                    found[iteration] = _checkpoint_path(path, scan.save_dir, iteration)
            if not found and scan.tracker is not None:
                found[scan.tracker] = _checkpoint_path(None, scan.save_dir, scan.tracker)
        else:
            for iteration, path in logged.items():
                found[iteration] = _checkpoint_path(path, self.save_dir, iteration)
        if not found:
            return None
        latest = max(found)
        return {"latestIteration": latest, "latestPath": found[latest], "count": len(found)}

    def _compute(self) -> dict:
        checkpoints = self._checkpoints()
        done = self._finished + 1
        if checkpoints is not None:
            done = max(done, checkpoints["latestIteration"] + 1)
        if self.total > 0:
            done = min(done, self.total)
        progress = {"rollout": done, "total": self.total,
                    "percent": min(100, done * 100 // self.total) if self.total > 0 else 0}
        eta = self._eta(done)
        if eta is not None:
            progress["etaSeconds"] = eta
        metrics = {}
        if self._step is not None:
            metrics["step"] = self._step
        for field, _ in METRIC_SOURCES:
            value = self._metrics.get(field)
            if _finite(value):
                metrics[field] = float(value)
        if self._diffs:
            metrics["trainRolloutLogprobAbsDiffMean"] = math.fsum(self._diffs.values()) / len(self._diffs)
        status = {"progress": progress, "metrics": metrics}
        if self._evals:
            status["eval"] = [dict(self._evals[name]) for name in sorted(self._evals)]
        if checkpoints is not None:
            status["checkpoints"] = checkpoints
        return status

    def _eta(self, done: int) -> Optional[int]:
        if self.total > 0 and done >= self.total:
            return 0
        if self._first is None or self._last is None or self._last[1] <= self._first[1]:
            return None
        per_rollout = (self._last[0] - self._first[0]) / (self._last[1] - self._first[1])
        return max(0, int(round(per_rollout * max(0, self.total - done))))

    def status(self) -> dict:
        """The owned status fields, without unknown or non-finite values."""
        status = copy.deepcopy(self._core)
        status["progress"]["lastUpdateTime"] = rfc3339(self._updated)
        return status


def patch_body(status: dict) -> dict:
    """Merge-patch body: only the owned fields; unknown resettable leaves become null."""
    body = {key: copy.deepcopy(status[key]) for key in OWNED_FIELDS if key in status}
    body.setdefault("progress", {}).setdefault("etaSeconds", None)
    metrics = body.setdefault("metrics", {})
    for field in METRIC_FIELDS:
        metrics.setdefault(field, None)
    return {"status": body}


# --------------------------------------------------------------------------------------------
# Kubernetes API
# --------------------------------------------------------------------------------------------


class ApiConfig(NamedTuple):
    server: str
    token_file: str
    ca_file: str


def api_config(env=None) -> Optional[ApiConfig]:
    env = os.environ if env is None else env
    server = env.get("LORARL_API_SERVER", "").strip()
    if not server:
        host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
        if not host:
            return None
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        server = f"https://{host}:{env.get('KUBERNETES_SERVICE_PORT', '443').strip() or '443'}"
    if not server.startswith(("https://", "http://")):
        return None
    return ApiConfig(server.rstrip("/"), env.get("LORARL_TOKEN_FILE") or f"{SA_DIR}/token",
                     env.get("LORARL_CA_FILE") or f"{SA_DIR}/ca.crt")


def status_url(server: str, namespace: str, name: str) -> str:
    q = urllib.parse.quote
    return f"{server}/apis/{GROUP}/{VERSION}/namespaces/{q(namespace, safe='')}/{PLURAL}/{q(name, safe='')}/status"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        detail = ""
        try:
            detail = str(json.loads(exc.read(4096).decode("utf-8", "replace")).get("message", ""))
        except Exception:
            pass
        text = f"HTTP {exc.code} {exc.reason}"
        return f"{text}: {detail[:200]}" if detail else text
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason
        return f"{type(reason).__name__}: {reason}"[:200] if isinstance(reason, BaseException) else str(reason)[:200]
    return f"{type(exc).__name__}: {exc}"[:200]


class Patcher:
    """Sends merge patches to the LoraRLJob status subresource. Never raises."""

    def __init__(self, api: ApiConfig, namespace: str, name: str, timeout: float = REQUEST_TIMEOUT):
        self.api = api
        self.target = f"{namespace}/{name}"
        self.url = status_url(api.server, namespace, name)
        self.timeout = timeout
        self.sent = 0
        self.failures = 0  # consecutive failed attempts
        self._lock = threading.Lock()
        self._opener = None

    def _token(self) -> Optional[str]:
        try:
            with open(self.api.token_file, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            return None

    def _build_opener(self):
        handlers = [urllib.request.ProxyHandler({})]
        if self.url.startswith("https://"):
            ctx = ssl.create_default_context()
            if os.path.exists(self.api.ca_file):
                ctx.load_verify_locations(cafile=self.api.ca_file)
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        return urllib.request.build_opener(*handlers)

    def send(self, status: dict, timeout: Optional[float] = None) -> bool:
        try:
            data = json.dumps(patch_body(status), allow_nan=False, separators=(",", ":")).encode()
            request = urllib.request.Request(self.url, data=data, method="PATCH", headers={
                "Content-Type": "application/merge-patch+json",
                "Accept": "application/json",
                "User-Agent": "lorarl-reporter",
            })
            token = self._token()
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            if self._opener is None:
                self._opener = self._build_opener()
            with self._opener.open(request, timeout=timeout or self.timeout) as response:
                response.read()
        except Exception as exc:  # reporting must never take the run down
            self._opener = None  # rebuild (CA may have rotated)
            self._record(False, _describe(exc))
            return False
        self._record(True, "")
        return True

    def _record(self, ok: bool, reason: str) -> None:
        with self._lock:
            if ok:
                if self.failures:
                    warn(f"status patch to {self.target} recovered after {self.failures} failed attempt(s)")
                self.failures = 0
                self.sent += 1
            else:
                if self.failures == 0:
                    warn(f"status patch to {self.target} failed ({reason}); retrying quietly")
                self.failures += 1


# --------------------------------------------------------------------------------------------
# Background loop: throttled patches and save-dir scans
# --------------------------------------------------------------------------------------------


class Reporter:
    """Owns the Summary (behind a lock) and the thread that patches and scans."""

    def __init__(self, summary: Summary, patcher: Optional[Patcher], interval: float,
                 save_dir: Optional[str] = None, monotonic: Callable[[], float] = time.monotonic):
        self.summary = summary
        self.patcher = patcher
        self.interval = max(0.05, float(interval))
        self.save_dir = save_dir
        self._now = monotonic
        self._cond = threading.Condition()
        self._stopping = False
        self._sent_version = 0
        self._last_attempt = -math.inf
        self._next_scan = -math.inf
        self._loop_error_logged = False
        self._thread = threading.Thread(target=self._run, name="lorarl-reporter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def feed(self, event: Event) -> None:
        with self._cond:
            if self.summary.apply(event):
                self._cond.notify()

    def snapshot(self) -> tuple:
        with self._cond:
            return self.summary.version, self.summary.status()

    def _due(self, now: float) -> tuple:
        patch_due = (self.patcher is not None and self.summary.version != self._sent_version
                     and now >= self._last_attempt + self.interval)
        scan_due = self.save_dir is not None and now >= self._next_scan
        return patch_due, scan_due

    def _wait_time(self, now: float) -> Optional[float]:
        deadlines = []
        if self.patcher is not None and self.summary.version != self._sent_version:
            deadlines.append(self._last_attempt + self.interval)
        if self.save_dir is not None:
            deadlines.append(self._next_scan)
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _run(self) -> None:
        while True:
            try:
                with self._cond:
                    while True:
                        if self._stopping:
                            return
                        now = self._now()
                        patch_due, scan_due = self._due(now)
                        if patch_due or scan_due:
                            break
                        self._cond.wait(self._wait_time(now))
                if scan_due:
                    self._next_scan = self._now() + self.interval
                    scan = scan_save_dir(self.save_dir)
                    with self._cond:
                        self.summary.apply_scan(scan)
                with self._cond:
                    patch_due, _ = self._due(self._now())
                    version, status = self.summary.version, self.summary.status()
                if patch_due:
                    self._last_attempt = self._now()
                    if self.patcher.send(status):
                        self._sent_version = version
            except Exception as exc:  # keep reporting alive; never take the run down
                if not self._loop_error_logged:
                    self._loop_error_logged = True
                    warn(f"internal error in status loop: {type(exc).__name__}: {exc}"[:300])
                time.sleep(self.interval)

    def finish(self, total_timeout: float = FINAL_TIMEOUT) -> bool:
        """Stop the loop, rescan, and send the final patch (bounded). True when delivered."""
        deadline = self._now() + total_timeout
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            timeout = (self.patcher.timeout if self.patcher else 0) + 0.5
            self._thread.join(max(0.0, min(timeout, deadline - self._now())))
        if self.save_dir is not None:
            result = []
            scanner = threading.Thread(target=lambda: result.append(scan_save_dir(self.save_dir)), daemon=True)
            scanner.start()
            scanner.join(max(0.0, min(2.0, deadline - self._now())))
            if result:
                with self._cond:
                    self.summary.apply_scan(result[0])
        if self.patcher is None:
            return False
        _, status = self.snapshot()
        for attempt in range(3):
            remaining = deadline - self._now()
            if remaining <= 0.1:
                break
            if self.patcher.send(status, timeout=min(self.patcher.timeout, remaining)):
                return True
            time.sleep(max(0.0, min(0.5, deadline - self._now())))
        warn(f"final status patch to {self.patcher.target} was not delivered")
        return False


# --------------------------------------------------------------------------------------------
# Child process and output passthrough
# --------------------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        except OSError:  # EPIPE etc.: stop writing, keep draining the child
            return False
        view = view[n:]
    return True


def pump(src_fd: int, dst_fd: int, on_line: Callable[[bytes], None]) -> None:
    """Copy src to dst as bytes arrive; hand every complete line to on_line afterwards."""
    writing = True
    buf = bytearray()
    skipping = False  # inside an over-long line
    while True:
        try:
            chunk = os.read(src_fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        if writing:
            writing = _write_all(dst_fd, chunk)
        buf += chunk
        start = 0
        while True:
            newline = buf.find(b"\n", start)
            if newline < 0:
                break
            if not skipping:
                on_line(bytes(buf[start:newline]))
            skipping = False
            start = newline + 1
        del buf[:start]
        if len(buf) > MAX_LINE:
            buf.clear()
            skipping = True
    if buf and not skipping:
        on_line(bytes(buf))
    try:
        os.close(src_fd)
    except OSError:
        pass


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # raise instead of exiting
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="reporter.py", description="Run the miles trainer and report its progress "
                "to the LoraRLJob status.", usage="%(prog)s --namespace NS --name JOB "
                "--total-rollouts N [--save-dir DIR] [--interval SECONDS] -- COMMAND [ARGS...]")
    p.add_argument("--namespace", required=True, help="namespace of the LoraRLJob")
    p.add_argument("--name", required=True, help="name of the LoraRLJob")
    p.add_argument("--total-rollouts", required=True, type=int, help="num_rollout of the run")
    p.add_argument("--save-dir", default=None, help="Megatron --save directory to scan for checkpoints")
    p.add_argument("--interval", default=15.0, type=float, help="minimum seconds between patches (15)")
    p.add_argument("--resume", action="store_true",
                   help="append --lora-adapter-path for the newest complete checkpoint under --save-dir")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        split = argv.index("--")
        option_args, command = argv[:split], argv[split + 1:]
    else:
        option_args, command = argv, []
    parser = build_parser()
    if not command:
        if "-h" in option_args or "--help" in option_args:
            parser.print_help()
            return 0
        sys.stderr.write(parser.format_usage() + f"{PREFIX} error: no command given after --\n")
        return 2
    opts = None
    try:
        if "-h" in option_args or "--help" in option_args:
            raise _UsageError("-h/--help given together with a command")
        opts = parser.parse_args(option_args)
    except _UsageError as exc:
        warn(f"bad reporter options ({exc}); running the command without status reporting")

    state = {"child": None, "pending": []}

    def forward(signum, _frame):
        child = state["child"]
        if child is None:
            state["pending"].append(signum)
            return
        try:
            child.send_signal(signum)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            signal.signal(sig, forward)
        except (OSError, ValueError):
            pass

    if opts is not None and opts.resume and opts.save_dir and "--lora-adapter-path" not in command:
        adapter = resume_adapter(opts.save_dir)
        if adapter:
            warn(f"resuming from {adapter}")
            command = command + ["--lora-adapter-path", adapter]

    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    except PermissionError as exc:
        warn(f"cannot run {command[0]!r}: {exc}")
        return 126
    except OSError as exc:
        warn(f"cannot run {command[0]!r}: {exc}")
        return 127
    state["child"] = child
    for signum in state["pending"]:
        forward(signum, None)

    reporter = None
    if opts is not None:
        try:
            reporter = _make_reporter(opts)
            reporter.start()
        except Exception as exc:
            warn(f"status reporting disabled: {type(exc).__name__}: {exc}"[:300])
            reporter = None

    def on_line(line: bytes) -> None:
        if reporter is None:
            return
        for segment in line.split(b"\r"):
            event = parse_line(segment)
            if event is not None:
                try:
                    reporter.feed(event)
                except Exception:
                    pass

    pumps = [
        threading.Thread(target=pump, args=(child.stdout.fileno(), _fileno(sys.stdout, 1), on_line), daemon=True),
        threading.Thread(target=pump, args=(child.stderr.fileno(), _fileno(sys.stderr, 2), on_line), daemon=True),
    ]
    for t in pumps:
        t.start()
    returncode = child.wait()
    drain_deadline = time.monotonic() + 5.0  # grandchildren may hold the pipes open
    for t in pumps:
        t.join(max(0.0, drain_deadline - time.monotonic()))
    if reporter is not None:
        try:
            reporter.finish()
        except Exception as exc:
            warn(f"final status report failed: {type(exc).__name__}: {exc}"[:300])
    return exit_code(returncode)


def _fileno(stream, default: int) -> int:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return default


def _make_reporter(opts) -> Reporter:
    summary = Summary(opts.total_rollouts, save_dir=opts.save_dir)
    config = api_config()
    patcher = None
    if config is None:
        warn("no Kubernetes API configured (KUBERNETES_SERVICE_HOST or LORARL_API_SERVER); "
             "status reporting disabled")
    else:
        patcher = Patcher(config, opts.namespace, opts.name)
    return Reporter(summary, patcher, opts.interval, save_dir=opts.save_dir)


if __name__ == "__main__":
    sys.exit(main())
