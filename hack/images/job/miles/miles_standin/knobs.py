"""Test knobs: ``standin.json`` in the --hf-checkpoint directory (the model repo the test serves
from the Hub stand-in carries it, so no LoraRLJob field is needed). Every key is optional:

    seconds_per_rollout   float  wall time of one rollout's generation (default 0.2)
    resumed_seconds_per_rollout  float  the same in an attempt that restores an adapter
                                 (--lora-adapter-path: a resume), so a test's fault lands
                                 mid-run and the resumed rest goes fast (default: as above)
    seconds_per_step      float  wall time of one optimizer step (default 0.0)
    exit_at_rollout       K      exit 1 (an uncaught RuntimeError) when rollout K starts
    hang_at_rollout       K      sleep forever (still alive) when rollout K starts
    sigkill_at_rollout    K      SIGKILL itself when rollout K starts
    nan_reward_from       K      every sample reward is NaN from rollout K on
    allocate_mib          M      allocate and touch M MiB (kept) ...
    allocate_at_rollout   K      ... when rollout K starts (default 0)
    cpu_scale             float  CPU share of miles' Ray requests (default 0.1, 1.0 = miles')
    seed                  int    the run's random seed (default 1234)
    adapter_data          0|1    rank 0's adapter_model.bin holds the tensors' data (default 0: shapes only)

K is the trainer's own (0-based) rollout id. A fault knob given as ``{"rollout": K, "times": T}``
fires in at most T attempts: fires are counted in ``standin-faults.json`` in the save root
(``--save``, or its parent when --save is an ``attempt-NNN`` directory), so "fail once, then
resume" needs no second spec. A bad knob file is an error naming the key.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

FILE = "standin.json"
FAULTS_FILE = "standin-faults.json"
FAULTS = ("exit_at_rollout", "hang_at_rollout", "sigkill_at_rollout")
_FLOATS = {"seconds_per_rollout": 0.2, "resumed_seconds_per_rollout": None, "seconds_per_step": 0.0, "cpu_scale": 0.1}
_INTS = {"nan_reward_from": None, "allocate_mib": None, "allocate_at_rollout": 0, "seed": 1234, "adapter_data": 0}


class KnobError(ValueError):
    pass


@dataclass
class Fault:
    rollout: int
    times: int | None = None  # None: every attempt


@dataclass
class Knobs:
    seconds_per_rollout: float = 0.2
    resumed_seconds_per_rollout: float | None = None
    seconds_per_step: float = 0.0
    cpu_scale: float = 0.1
    nan_reward_from: int | None = None
    allocate_mib: int | None = None
    allocate_at_rollout: int = 0
    seed: int = 1234
    adapter_data: int = 0
    faults: dict = field(default_factory=dict)  # name -> Fault
    source: str | None = None  # the file read, if any


def _int(key, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KnobError(f"{FILE}: {key} must be a non-negative integer, got {value!r}")
    return value


def parse(doc: dict, source: str | None = None) -> Knobs:
    if not isinstance(doc, dict):
        raise KnobError(f"{FILE}: must be a JSON object")
    knobs = Knobs(source=source)
    for key, value in doc.items():
        if key in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise KnobError(f"{FILE}: {key} must be a non-negative number, got {value!r}")
            setattr(knobs, key, float(value))
        elif key in _INTS:
            setattr(knobs, key, _int(key, value))
        elif key in FAULTS:
            if isinstance(value, dict):
                unknown = set(value) - {"rollout", "times"}
                if unknown or "rollout" not in value:
                    raise KnobError(f'{FILE}: {key} must be K or {{"rollout": K, "times": T}}, got {value!r}')
                times = value.get("times")
                knobs.faults[key] = Fault(_int(f"{key}.rollout", value["rollout"]), None if times is None else _int(f"{key}.times", times))
            else:
                knobs.faults[key] = Fault(_int(key, value))
        else:
            raise KnobError(f"{FILE}: unknown key {key!r}")
    return knobs


def load(hf_checkpoint: str) -> Knobs:
    path = os.path.join(hf_checkpoint, FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return Knobs()
    except ValueError as exc:
        raise KnobError(f"{path}: not valid JSON: {exc}") from None
    return parse(doc, path)


def save_root(save: str | None) -> str | None:
    if not save:
        return None
    save = save.rstrip("/")
    return os.path.dirname(save) if re.fullmatch(r"attempt-\d+", os.path.basename(save)) else save


def should_fire(name: str, fault: Fault, rollout: int, save: str | None) -> bool:
    """True when the fault is due now; a limited fault is counted before it fires."""
    if rollout != fault.rollout:
        return False
    root = save_root(save)
    if fault.times is None or root is None:
        return True
    path = os.path.join(root, FAULTS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            fired = json.load(f)
    except (OSError, ValueError):
        fired = {}
    if fired.get(name, 0) >= fault.times:
        return False
    fired[name] = fired.get(name, 0) + 1
    os.makedirs(root, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(fired, f)
    os.replace(path + ".tmp", path)
    return True
