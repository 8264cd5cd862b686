"""Which LoRA saves are complete, and which one is being written. Reads the file system only.

On the LoRA path miles writes neither Megatron's "saved checkpoint" line nor
``latest_checkpointed_iteration.txt``; a save of iteration N (= rollout id) goes to
``<save>/iter_NNNNNNN/adapter/`` in this order (miles 31f1ca9, megatron_utils/lora_utils.py:445-517):
the directory; every rank's ``adapter_megatron_rank<r>.pt``; rank 0's ``adapter_model.bin`` then
``adapter_config.json`` (skipped with a warning when the HF export fails); every rank's
``training_state_rank<r>.pt``; a barrier. So ``adapter_config.json`` proves nothing, and a save
is complete when

* every rank r < ranks has both ``adapter_megatron_rank<r>.pt`` and ``training_state_rank<r>.pt``,
  each a whole file (``torch.save`` writes a zip archive: its end record is written last), or
* a newer ``iter_*`` exists in the same save directory (saves are awaited before the next
  rollout, train.py:121-125), or
* the log shows a later rollout (the caller passes that evidence in).

Loading needs every rank's shard (lora_utils.py:560-576), which the first rule checks.
"""

from __future__ import annotations

import os
import re
import zipfile
from typing import NamedTuple

ADAPTER = "adapter"
_ITER_DIR_RE = re.compile(r"iter_(\d+)")
_SHARD_RE = re.compile(r"adapter_megatron_rank(\d+)\.pt")


def iter_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


class Save(NamedTuple):
    """One iter_* directory of one attempt."""

    attempt: int
    local: int  # the iteration miles wrote (its rollout id in that attempt)
    rollout: int  # the same iteration counted across attempts (local + the attempt's offset)
    adapter: str  # <save>/iter_NNNNNNN/adapter: what a user loads (--lora-adapter-path)
    files_complete: bool  # every rank's shard and training state are whole


class SaveDir(NamedTuple):
    attempt: int
    path: str
    offset: int  # rollouts finished before the attempt started


def _whole(path: str) -> bool:
    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False


def files_complete(adapter_dir: str, ranks: int) -> bool:
    """Every rank's shard and training state are there and whole. With ranks unknown (0), the
    shards found must run 0..n-1 and each must have its training state."""
    try:
        names = set(os.listdir(adapter_dir))
    except OSError:
        return False
    if ranks <= 0:
        shard_ranks = sorted(int(m.group(1)) for m in map(_SHARD_RE.fullmatch, names) if m)
        if not shard_ranks or shard_ranks != list(range(len(shard_ranks))):
            return False
        ranks = len(shard_ranks)
    for rank in range(ranks):
        for name in (f"adapter_megatron_rank{rank}.pt", f"training_state_rank{rank}.pt"):
            if name not in names or not _whole(os.path.join(adapter_dir, name)):
                return False
    return True


def _iterations(save_dir: str) -> dict | None:
    try:
        found = {}
        with os.scandir(save_dir) as entries:
            for entry in entries:
                m = _ITER_DIR_RE.fullmatch(entry.name)
                try:
                    is_dir = m is not None and entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir and m is not None:
                    found[int(m.group(1))] = entry.path
        return found
    except OSError:
        return None


def scan(save_dirs: list, ranks: int) -> list | None:
    """All saves of all attempts (list of Save, oldest attempt first); None when nothing can be
    listed at all (e.g. the volume is not there yet)."""
    saves, listed = [], False
    for d in save_dirs:
        found = _iterations(d.path)
        if found is None:
            continue
        listed = True
        for local in sorted(found):
            adapter = os.path.join(found[local], ADAPTER)
            saves.append(Save(d.attempt, local, local + d.offset, adapter, files_complete(adapter, ranks)))
    return saves if listed else None


class Verdict(NamedTuple):
    complete: list  # Save, complete, sorted by rollout
    saving: Save | None  # the current attempt's save being written, if any


def judge(saves: list, current_attempt: int = 0, logged_done_local: int = -1) -> Verdict:
    """Apply the three rules. ``logged_done_local``: the highest local iteration of the current
    attempt that the log proves finished (a later rollout's line appeared)."""
    newest: dict[int, int] = {}
    for s in saves:
        newest[s.attempt] = max(newest.get(s.attempt, -1), s.local)
    complete, saving = [], None
    for s in saves:
        done = s.files_complete or s.local < newest[s.attempt] or (s.attempt == current_attempt and s.local <= logged_done_local)
        if done:
            complete.append(s)
        elif s.attempt == current_attempt:
            saving = s
    complete.sort(key=lambda s: (s.rollout, s.attempt))
    return Verdict(complete, saving)


def newest_complete(saves: list) -> Save | None:
    complete = judge(saves).complete
    return complete[-1] if complete else None
