"""The resume decision: which attempt this is, and the command it runs.

miles as it is (31f1ca9, see ``shared/reference/miles-lora-checkpoints-and-logs.md``): with
``--lora-adapter-path`` it restores the adapter and the optimizer, but in bridge mode without
``latest_checkpointed_iteration.txt`` it restarts the rollout loop at id 0 (utils/arguments.py:3035-3045),
trains the full ``--num-rollout`` and writes ``iter_<id>`` into ``--save`` again. So on top of it:

* attempt 1 runs the rendered command unchanged (the recipe, flag for flag);
* attempt k > 1 saves into ``<save>/attempt-<k>`` (a previous attempt's saves are never
  overwritten), resumes from the newest complete save of any attempt, and trains only what is
  left: ``--num-rollout`` = total - offset, where offset = that save's rollout + 1. The reporter
  adds the offset to every id the trainer prints. With ``resume`` off, attempt k > 1 starts over
  (offset 0) in its own directory.
* when nothing is left (the last save is complete), the trainer is not started at all.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from . import attempts, checkpoints


class Plan(NamedTuple):
    attempt: int
    offset: int  # rollouts done before this attempt (counted across attempts)
    save_dir: str  # this attempt's --save
    num_rollout: int  # this attempt's --num-rollout
    adapter: str | None  # --lora-adapter-path, when resuming
    argv: list  # the command to run
    record: dict  # this attempt's ledger record


def attempt_save_dir(save_root: str, attempt: int) -> str:
    return save_root if attempt == 1 else os.path.join(save_root, f"attempt-{attempt:03d}")


def save_dirs(save_root: str, records: list) -> list:
    """Where every attempt saved, with its offset. Without a ledger, ``save_root`` is attempt 1."""
    dirs = [checkpoints.SaveDir(r["attempt"], str(r.get("saveDir") or attempt_save_dir(save_root, r["attempt"])), int(r.get("offset") or 0)) for r in records]
    if not any(d.attempt == 1 for d in dirs):
        dirs.insert(0, checkpoints.SaveDir(1, save_root, 0))
    return dirs


def _set_flag(argv: list, flag: str, value: str) -> list:
    """Every ``flag VALUE`` pair gets ``value`` (argparse keeps the last one, which may come from
    the user's extra args); appended when absent."""
    out = list(argv)
    found = False
    for i, word in enumerate(out[:-1]):
        if word == flag:
            out[i + 1] = value
            found = True
    return out if found else out + [flag, value]


def rewrite(argv: list, save_dir: str, num_rollout: int, adapter: str | None) -> list:
    """This attempt's command. A resumed attempt loads our checkpoint, even when the user's
    extra args name a starting adapter (that one was loaded by attempt 1)."""
    out = _set_flag(argv, "--save", save_dir)
    out = _set_flag(out, "--num-rollout", str(num_rollout))
    if adapter:
        out = _set_flag(out, "--lora-adapter-path", adapter)
    return out


def plan(argv: list, save_root: str, total: int, ranks: int, gpus: int, resume: bool, now: float) -> Plan:
    """Claim the next attempt on the volume and decide its command."""
    found: dict = {}  # what make_record decided (it runs under the ledger's lock)

    def make_record(attempt: int) -> dict:
        offset, adapter = 0, None
        if attempt > 1 and resume:
            records = attempts.read_all(save_root)
            saves = checkpoints.scan(save_dirs(save_root, records), ranks) or []
            newest = checkpoints.newest_complete(saves)
            if newest is not None:
                offset, adapter = min(total, newest.rollout + 1), newest.adapter
        save_dir = attempt_save_dir(save_root, attempt)
        found.update(offset=offset, adapter=adapter, save_dir=save_dir)
        return {
            "saveDir": save_dir,
            "offset": offset,
            "numRollout": max(0, total - offset),
            "resumedFrom": adapter,
            "gpus": gpus,
            "startedAt": now,
            "aliveAt": now,
            "finished": offset,
        }

    record = attempts.claim(save_root, make_record)
    attempt = record["attempt"]
    if attempt == 1:
        command = list(argv)
    else:
        command = rewrite(argv, found["save_dir"], max(0, total - found["offset"]), found["adapter"])
    return Plan(attempt, found["offset"], found["save_dir"], max(0, total - found["offset"]), found["adapter"], command, record)
