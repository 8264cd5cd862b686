"""The attempt ledger: one JSON record per attempt on the checkpoint volume.

A KubeRay retry (RayJob ``backoffLimit``) and a re-created RayJob both re-run the entrypoint in
a new RayCluster: nothing in process memory survives, the job volume does. So the attempt
number is 1 + the number of records under ``<save>/lorarl-attempts/`` (claimed with O_EXCL, so
two starts can never share a number), and each record keeps what later attempts and the status
need: where the attempt saves, how many rollouts were done before it, and how long it ran.

Record fields: attempt, saveDir, offset, numRollout, resumedFrom, gpus, startedAt, aliveAt
(seconds since the epoch; aliveAt is refreshed while the attempt runs), finished (rollouts
done, counted across attempts, as last seen by this attempt), evals ([rollout, {name: score}])
and diffs ([step, train_rollout_logprob_abs_diff]) of this attempt, rollouts and steps counted
across attempts.
"""

from __future__ import annotations

import json
import os
import re

LEDGER_DIR = "lorarl-attempts"
_RECORD_RE = re.compile(r"(\d{3,})\.json")


def ledger_dir(save_root: str) -> str:
    return os.path.join(save_root, LEDGER_DIR)


def record_path(save_root: str, attempt: int) -> str:
    return os.path.join(ledger_dir(save_root), f"{attempt:03d}.json")


def read_all(save_root: str) -> list:
    """Every readable record, by attempt number. A torn or foreign file is skipped."""
    out: list[dict] = []
    try:
        names = os.listdir(ledger_dir(save_root))
    except OSError:
        return out
    for name in names:
        m = _RECORD_RE.fullmatch(name)
        if not m:
            continue
        try:
            with open(os.path.join(ledger_dir(save_root), name), encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError):
            record = {}
        if not isinstance(record, dict):
            record = {}
        record["attempt"] = int(m.group(1))  # the file name is the truth
        out.append(record)
    return sorted(out, key=lambda r: r["attempt"])


def claim(save_root: str, make_record) -> dict:
    """Create the next attempt's record; ``make_record(attempt)`` returns its fields."""
    os.makedirs(ledger_dir(save_root), exist_ok=True)
    attempt = max((r["attempt"] for r in read_all(save_root)), default=0) + 1
    while True:
        record = dict(make_record(attempt), attempt=attempt)
        try:
            fd = os.open(record_path(save_root, attempt), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            attempt += 1
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, sort_keys=True)
        return record


def update(save_root: str, record: dict) -> bool:
    """Rewrite a record atomically (write + rename). False when the volume refuses."""
    path = record_path(save_root, record["attempt"])
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f, sort_keys=True)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def ran_seconds(record: dict) -> float:
    try:
        return max(0.0, float(record.get("aliveAt", 0)) - float(record.get("startedAt", 0)))
    except (TypeError, ValueError):
        return 0.0


def trained(record: dict) -> int:
    """Rollouts this attempt trained (some may be trained again after a retry)."""
    try:
        return max(0, int(record.get("finished", 0)) - int(record.get("offset", 0)))
    except (TypeError, ValueError):
        return 0
