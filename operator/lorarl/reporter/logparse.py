"""miles log lines -> events. Pure; never raises.

Formats (``shared/reference/miles-lora-checkpoints-and-logs.md``, miles 31f1ca9): Python logging
``[YYYY-MM-DD HH:MM:SS.mmm <name>] <file>:<line> - <message>`` (utils/logging_utils.py:33-37),
optionally behind a Ray actor prefix such as ``(MegatronTrainRayActor pid=1234, ip=10.0.0.5) ``.
ANSI colour codes are stripped; Ray's `` [repeated 3x across cluster]`` suffix is ignored. The
message must start right after the header (or prefix, or at the start of the line), so an
indented copy inside a traceback is not taken for a real one.

Messages::

    perf <id>: {...}      rollout stats ('rollout/...', 'perf/...'; ray/rollout/metrics.py:89);
                          a second one with only 'perf/*' timings follows training
                          (utils/train_metric_utils.py:56)
    rollout <id>: {...}   printed by the train actor before it trains rollout <id>
                          (training_utils/log_utils.py:123)
    step <n>: {...}       n = id * steps_per_rollout + step; printed twice (log_utils.py:542,
                          megatron_utils/model.py:854); 'critic-step' lines are ignored
    eval <id>: {...}      'eval/<name>' scores (ray/rollout/metrics.py:53)
    Saving LoRA checkpoint to <save>/iter_NNNNNNN/adapter      (megatron_utils/checkpoint.py:160)
    Resuming LoRA training from iteration <N>                  (lora_utils.py:620)
    ... --lora-adapter-path=<dir> was specified, but adapter weights could not be loaded ...
                                                   (checkpoint.py:145-149: a fresh adapter)
    ... successfully saved checkpoint from iteration <N> ...   (Megatron, non-LoRA saves only)
    wandb: ... View run [<name>] at[:] <url>                   (wandb/sdk/wandb_run.py:3847, 3901)

A message is accepted only when its dict has a key of the expected family. Dicts are read with
``ast.literal_eval``; when that fails (``np.float64(...)``, bare ``nan``/``inf``, truncation) a
regex picks up every ``'key': number`` pair. Only numeric values are kept (NaN/inf included).
"""

from __future__ import annotations

import ast
import math
import re
import threading
import warnings
from typing import NamedTuple

MAX_LITERAL = 1 << 20  # longer dict reprs skip ast.literal_eval


class Event(NamedTuple):
    kind: str  # perf | rollout | step | eval | saving | resumed | not_resumed | checkpoint | wandb
    id: int  # rollout id, step number or iteration (0 for wandb)
    values: dict  # metric key -> float (may be nan/inf); empty for the others
    path: str | None = None  # save path (saving/checkpoint) or the W&B run URL


_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_RAY_PREFIX_RE = re.compile(r"\((?:[^()\n]|\([^()\n]{0,100}\)){1,300}\) ")
_LOG_HEADER_RE = re.compile(r"\[[^\]\n]{0,200}\d\d:\d\d:\d\d[^\]\n]{0,200}\] \S+:\d+ - ")
_MESSAGE_RE = re.compile(r"(perf|rollout|step|eval) (\d+): (\{.*)")
_SAVING_RE = re.compile(r"Saving LoRA checkpoint to (\S*?iter_(\d+)\S*)")
_RESUMED_RE = re.compile(r"Resuming LoRA training from iteration (\d+)")
_NOT_RESUMED_RE = re.compile(r"--lora-adapter-path=(\S+) was specified, but adapter weights could not be loaded")
_CKPT_RE = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)(?:\s+to\s+(\S+))?")
_WANDB_RE = re.compile(r"wandb: .*?View run\b.*?\bat:? (https?://[^\s\x1b]+/runs/[^\s\x1b]+)")
_PAIR_RE = re.compile(
    r"""(?P<q>['"])(?P<key>[^'"\\\n]+)(?P=q)\s*:\s*"""
    r"""(?:[A-Za-z_][\w.]*\(\s*)?"""  # np.float64( / tensor( / float(
    r"""(?P<num>[-+]?(?:nan|inf(?:inity)?|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))(?![\w.])""",
    re.IGNORECASE,
)
_LITERAL_LOCK = threading.Lock()  # warnings.catch_warnings is process-global
_FAMILIES = {"perf": ("perf/", "rollout/"), "rollout": ("rollout/",), "step": ("train/",), "eval": ("eval/",)}


def _number(value) -> float | None:
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


def parse_line(line) -> Event | None:
    """One log line (str or bytes) -> Event, or None for anything else. Never raises."""
    try:
        return _parse_line(clean_line(line))
    except Exception:
        return None


def _message_start(line: str) -> int:
    pos = 0
    m = _RAY_PREFIX_RE.match(line, pos)
    if m:
        pos = m.end()
    m = _LOG_HEADER_RE.match(line, pos)
    return m.end() if m else pos


def _parse_line(line: str) -> Event | None:
    if "LoRA" in line:
        m = _SAVING_RE.search(line)
        if m:
            return Event("saving", int(m.group(2)), {}, m.group(1))
        m = _RESUMED_RE.search(line)
        if m:
            return Event("resumed", int(m.group(1)), {})
        m = _NOT_RESUMED_RE.search(line)
        if m:
            return Event("not_resumed", 0, {}, m.group(1))
    if "View run" in line and "wandb:" in line:
        m = _WANDB_RE.search(line)
        if m:
            return Event("wandb", 0, {}, m.group(1))
    if "successfully saved checkpoint" in line:
        m = _CKPT_RE.search(line)
        if m:
            return Event("checkpoint", int(m.group(1)), {}, m.group(2))
    if ": {" not in line:
        return None
    m = _MESSAGE_RE.match(line, _message_start(line))
    if not m:
        return None
    kind, body = m.group(1), m.group(3)
    end = body.rfind("}")
    if end >= 0:  # drop trailing text such as Ray's " [repeated 3x across cluster]"
        body = body[: end + 1]
    values = parse_metrics(body)
    if not any(key.startswith(_FAMILIES[kind]) for key in values):
        return None
    return Event(kind, int(m.group(2)), values)


def eval_scores(values: dict) -> dict:
    """The plain 'eval/<name>' scores of an eval dict: no further '/', not 'eval/step', and
    'eval/<name>-<suffix>' dropped when 'eval/<name>' is present (so 'eval/math-500' counts)."""
    plain = {}
    for key, value in values.items():
        if key.startswith("eval/"):
            name = key[5:]
            if name and "/" not in name and name != "step":
                plain[name] = value
    return {n: v for n, v in plain.items() if not any(n.startswith(o + "-") for o in plain if o != n)}
