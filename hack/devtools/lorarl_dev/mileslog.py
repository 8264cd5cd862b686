"""Source-faithful synthetic miles output on the LoRA path: the log of one attempt, and the
checkpoint tree it writes. Used by the reporter's tests and by `lorarl-dev demo`.

What it follows (``shared/reference/miles-lora-checkpoints-and-logs.md``, miles 31f1ca9):
* header ``[YYYY-MM-DD HH:MM:SS.mmm <name>] <file>:<line> - <message>`` (utils/logging_utils.py:33-37)
  behind a Ray actor prefix;
* per rollout id, in order: ``perf <id>`` from the rollout manager (ray/rollout/metrics.py:89);
  ``rollout <id>`` from the train actor, before training (training_utils/log_utils.py:123);
  each ``step <n>`` twice, n = id * steps_per_rollout + step (log_utils.py:522, 542 and
  megatron_utils/model.py:854); the train-timings ``perf <id>`` (utils/train_metric_utils.py:56);
* saves after rollout id when (id + 1) % save_interval == 0 or id is the last (train.py:121-125,
  utils/misc.py:130-151), logged as ``Saving LoRA checkpoint to <save>/iter_NNNNNNN/adapter``
  (megatron_utils/checkpoint.py:160) and lora_utils.py:458/496/514, never Megatron's
  "successfully saved" line, never ``latest_checkpointed_iteration.txt``;
* ``eval <id>`` before training (id 0) and after rollouts whose (id + 1) is a multiple of the
  interval: 0, 19, 39, ... (train.py:96, 136); no forced eval after the last rollout;
* a resumed attempt logs lora_utils.py:574/620 and checkpoint.py:141, then starts again at
  rollout 0 (utils/arguments.py:3035-3045);
* W&B prints ``wandb: 🚀 View run at <url>`` at start and ``View run <name> at: <url>`` at the
  end (wandb 0.31.0 wandb/sdk/wandb_run.py:3847, 3901; ``wandb: `` from wandb/errors/term.py:490).
* the save layout and write order of ``iter_NNNNNNN/adapter/`` (lora_utils.py:445-517): the
  directory; every rank's ``adapter_megatron_rank<r>.pt``; rank 0's ``adapter_model.bin`` and
  ``adapter_config.json``; every rank's ``training_state_rank<r>.pt``. ``torch.save`` files
  are zip archives (the stand-in files are small zips).
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import zipfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

BASE_TIME = datetime(2026, 11, 30, 8, 30, 0, tzinfo=UTC)
TRAIN_PREFIX = "\x1b[36m(MegatronTrainRayActor pid=1234, ip=10.0.0.5)\x1b[0m "
ROLLOUT_PREFIX = "\x1b[33m(RolloutManager pid=812, ip=10.0.0.5)\x1b[0m "
SGLANG_PREFIX = "\x1b[32m(SGLangEngine pid=2222, ip=10.0.0.5)\x1b[0m "
ADAPTER_TENSORS = 504  # 36 layers x 7 target modules x (A, B): Qwen3-4B, all-linear


@dataclass
class AttemptLog:
    """One attempt's output plus the values it was generated from (the ground truth).
    Ids are the trainer's own (local) ids."""

    num_rollouts: int
    save_dir: str
    lines: list = field(default_factory=list)  # bytes, each with its line ending
    line_times: list = field(default_factory=list)  # seconds since the start, per line
    raw_reward: dict = field(default_factory=dict)  # rollout -> value
    response_len: dict = field(default_factory=dict)
    truncated: dict = field(default_factory=dict)
    loss: dict = field(default_factory=dict)  # step -> value
    kl: dict = field(default_factory=dict)
    diff: dict = field(default_factory=dict)
    step_line: dict = field(default_factory=dict)  # rollout -> index of its last step line
    evals: list = field(default_factory=list)  # (rollout, {name: score})
    saves: list = field(default_factory=list)  # iterations whose save was logged
    last_rollout: int = -1  # the last rollout whose training finished

    @property
    def data(self) -> bytes:
        return b"".join(self.lines)

    def text_lines(self) -> list:
        return [line.decode("utf-8", "replace").rstrip("\r\n") for line in self.lines]


def saves_at(num_rollouts: int, save_interval: int) -> list:
    return [r for r in range(num_rollouts) if (r + 1) % save_interval == 0 or r == num_rollouts - 1]


def evals_at(num_rollouts: int, eval_interval: int | None) -> list:
    if not eval_interval:
        return []
    return [0] + [r for r in range(num_rollouts) if (r + 1) % eval_interval == 0 and r != 0]


def _stamp(seconds: float) -> str:
    t = BASE_TIME + timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def attempt_log(
    num_rollouts: int,
    *,
    save_dir: str,
    eval_interval: int | None = 20,
    save_interval: int = 50,
    ranks: int = 8,
    steps_per_rollout: int = 1,
    seed: int = 20261130,
    noise: bool = True,
    wandb_url: str | None = None,
    resumed_from: tuple | None = None,
    stop_after: int | None = None,
    die_saving: bool = False,
    datasets: tuple = ("aime24", "math-500"),
    seconds_per_rollout: float = 60.0,
) -> AttemptLog:
    """The output of one attempt of ``train.py --num-rollout num_rollouts --save save_dir``.

    ``resumed_from=(adapter_dir, iteration)``: the attempt was started with --lora-adapter-path.
    ``stop_after=r``: the attempt dies after rollout r's save (if any) and before rollout r+1;
    nothing of the normal ending is printed. With ``die_saving`` it dies during that save, right
    after the "Saving LoRA checkpoint" lines."""
    rng = random.Random(seed)
    log = AttemptLog(num_rollouts=num_rollouts, save_dir=save_dir)
    clock = [0.0]

    def emit(text="", *, prefix: str = "", raw: bytes | None = None, end: bytes = b"\n"):
        log.lines.append((raw if raw is not None else (prefix + text).encode("utf-8")) + end)
        log.line_times.append(clock[0])

    def logline(name, where, message, prefix=""):
        emit(f"[{_stamp(clock[0])} {name}] {where} - {message}", prefix=prefix)

    def actor(where, message, rank=0, repeated=0):
        suffix = f" [repeated {repeated}x across cluster]" if repeated else ""
        logline(f"actor_cell0_rank{rank}", where, message + suffix, prefix=TRAIN_PREFIX)

    def manager(where, message):
        logline("rollout_manager", where, message, prefix=ROLLOUT_PREFIX)

    def chatter():
        choice = rng.randrange(9)
        if choice == 0:
            emit(
                f"[{_stamp(clock[0])}] Decode batch. #running-req: {rng.randint(1, 64)}, #token: "
                f"{rng.randint(1000, 90000)}, token usage: {rng.random():.2f}, gen throughput "
                f"(token/s): {rng.uniform(100, 5000):.2f}, #queue-req: 0",
                prefix=SGLANG_PREFIX,
            )
        elif choice == 1:
            done = rng.randint(1, 64)
            emit(f"Rollout generation: {done * 100 // 64:3d}%|\u2588\u2588\u258c   | {done}/64 [00:12<00:15,  2.31it/s]", end=b"\r")
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
            actor("actor.py:321", f"Timer train end (elapsed: {rng.random():.3f}s)")

    def add_eval(rollout: int):
        scores = {}
        d = {}
        for i, name in enumerate(datasets):
            score = round(min(1.0, 0.55 + 0.1 * i + 0.0004 * rollout + rng.uniform(-0.05, 0.05)), 4)
            scores[name] = score
            d[f"eval/{name}"] = score
            d[f"eval/{name}-truncated_ratio"] = rng.random() / 10
            d[f"eval/{name}-none_reward_ratio"] = 0.0
            d[f"eval/{name}/response_len/mean"] = rng.uniform(3000, 9000)
        log.evals.append((rollout, scores))
        text = repr(d)
        if rollout % 2 == 1:  # --log-passrate values are np.float64 reprs (utils/metric_utils.py:34)
            text = text[:-1] + f", 'eval/{datasets[0]}-pass@16': np.float64({rng.random()!r})}}"
        manager("metrics.py:53", f"eval {rollout}: {text}")

    def save(rollout: int):
        adapter = f"{save_dir.rstrip('/')}/iter_{rollout:07d}/adapter"
        actor("checkpoint.py:160", f"Saving LoRA checkpoint to {adapter}")
        if ranks > 1:
            actor("checkpoint.py:160", f"Saving LoRA checkpoint to {adapter}", rank=1, repeated=ranks - 1)
        if die_saving and rollout == stop_after:
            return
        actor("lora_utils.py:458", f"Saved {ADAPTER_TENSORS} adapter tensors (native) to {adapter}/adapter_megatron_rank0.pt")
        actor("lora_utils.py:496", f"Saved HF PEFT adapter to {adapter} with {ADAPTER_TENSORS} tensors")
        actor("lora_utils.py:514", f"Saved optimizer/scheduler state to {adapter}")
        if ranks > 1:
            actor("lora_utils.py:514", f"Saved optimizer/scheduler state to {adapter}", rank=1, repeated=ranks - 1)
        log.saves.append(rollout)

    emit("2026-11-30 08:29:58,001\tINFO worker.py:1832 -- Connected to Ray cluster.")
    if wandb_url:
        emit("wandb: Tracking run with wandb version 0.31.0")
        emit(f"wandb: Syncing run {wandb_url.rsplit('/', 1)[-1]}")
        emit(f"wandb: \u2b50\ufe0f View project at {wandb_url.rsplit('/runs/', 1)[0]}")
        emit(f"wandb: \U0001f680 View run at \x1b[34m\x1b[4m{wandb_url}\x1b[0m")
    if resumed_from is not None:
        adapter, iteration = resumed_from
        actor("lora_utils.py:574", f"Loaded {ADAPTER_TENSORS} adapter tensors from Megatron-native checkpoint: {adapter}/adapter_megatron_rank0.pt")
        actor("lora_utils.py:612", "Restored optimizer state from LoRA checkpoint")
        actor("lora_utils.py:620", f"Resuming LoRA training from iteration {iteration}")
        actor("checkpoint.py:141", f"Successfully loaded LoRA adapter from {adapter}")

    save_ids, eval_ids = set(saves_at(num_rollouts, save_interval)), set(evals_at(num_rollouts, eval_interval))
    for r in range(num_rollouts):
        clock[0] = seconds_per_rollout * r + 5.0
        if r == 0 and 0 in eval_ids:
            add_eval(0)
        for _ in range(rng.randint(1, 3) if noise else 0):
            chatter()
        resp, trunc = round(rng.uniform(1500, 8000), 3), round(rng.random() / 4, 5)
        log.response_len[r], log.truncated[r] = resp, trunc
        perf = {
            "rollout/response_len/mean": resp,
            "rollout/response_len/median": resp * 0.9,
            "rollout/zero_std/count_0.0": rng.randint(0, 4),
            "rollout/repetition_frac": rng.random(),
            "rollout/truncated_ratio": trunc,
            "perf/rollout_time": rng.uniform(100, 300),
            **{f"perf/extra_{i}": round(rng.uniform(-10, 1000), 6) for i in range(30)},
        }
        manager("metrics.py:89", f"perf {r}: {perf}")
        clock[0] += 20.0
        reward = round(rng.uniform(-1, 1), 6)
        log.raw_reward[r] = reward
        rollout = {
            "rollout/log_probs": -rng.random(),
            "rollout/rollout_log_probs": -rng.random(),
            "rollout/raw_reward": reward,
            "rollout/rewards": rng.random(),
            **{f"rollout/extra_{i}": round(rng.uniform(-10, 1000), 6) for i in range(20)},
        }
        actor("log_utils.py:123", f"rollout {r}: {rollout}")
        for s in range(steps_per_rollout):
            clock[0] += 25.0 / steps_per_rollout
            n = r * steps_per_rollout + s
            loss, kl = round(rng.uniform(-0.1, 0.1), 6), round(rng.random() / 1000, 8)
            diff = rng.uniform(0.005, 0.02)  # full float precision, as the trainer prints it
            if n == 37:
                diff = float("nan")
            if r == num_rollouts - 1:
                kl = float("nan")
            log.loss[n], log.kl[n], log.diff[n] = loss, kl, diff
            step = {
                "train/loss": loss,
                "train/pg_loss": loss,
                "train/entropy_loss": rng.random(),
                "train/pg_clipfrac": rng.random() / 100,
                "train/ppo_kl": kl,
                "train/train_rollout_logprob_abs_diff": diff,
                "train/train_rollout_kl": rng.random() / 1000,
                "train/grad_norm": float("nan") if n % 11 == 5 else rng.random(),
                "train/lr-pg_0": 2e-05,
                "train/step": n,
            }
            text = repr(step)  # nan/inf are bare names: ast.literal_eval fails, the fallback reads them
            actor("log_utils.py:542", f"step {n}: {text}")
            log.step_line[r] = len(log.lines)
            actor("model.py:854", f"step {n}: {text}")
        timings = {
            "perf/actor_train_time": rng.uniform(20, 40),
            "perf/log_probs_time": rng.random() * 5,
            "perf/train_wait_time": rng.random(),
            "perf/step_time": rng.uniform(40, 80),
        }
        actor("train_metric_utils.py:56", f"perf {r}: {timings}")
        log.last_rollout = r
        if r in save_ids:
            clock[0] += 5.0
            save(r)
            if die_saving and r == stop_after:
                return log
        if r != 0 and r in eval_ids:
            clock[0] += 5.0
            add_eval(r)
        if stop_after is not None and r >= stop_after:
            return log
        if noise and rng.random() < 0.2:
            chatter()
    if wandb_url:
        emit(f"wandb: \U0001f680 View run {wandb_url.rsplit('/', 1)[-1]} at: \x1b[34m\x1b[4m{wandb_url}\x1b[0m")
    emit("Job 'raysubmit_abc' succeeded", end=b"\r\n")
    return log


# ----------------------------------------------------------------------------- checkpoint trees


def _torch_file(name: str, payload: bytes) -> bytes:
    """A stand-in for a torch.save file: a zip archive (torch's default format since 1.6)."""
    stem = name.rsplit(".", 1)[0]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{stem}/data.pkl", payload)
        z.writestr(f"{stem}/version", b"3\n")
    return buf.getvalue()


def write_order(ranks: int, hf_export: bool = True) -> list:
    """The files of one save in the order they appear (lora_utils.py:445-517). Ranks write their
    shards in parallel, the HF export is collective, so every shard exists before rank 0 writes
    the HF files; the training states follow."""
    files = [f"adapter_megatron_rank{r}.pt" for r in range(ranks)]
    if hf_export:
        files += ["adapter_model.bin", "adapter_config.json"]
    return files + [f"training_state_rank{r}.pt" for r in range(ranks)]


def write_save(save_dir: str, iteration: int, ranks: int, *, files: int | None = None, torn_last: bool = False, hf_export: bool = True) -> str:
    """Write ``<save_dir>/iter_NNNNNNN/adapter`` in the trainer's order; ``files`` stops after that
    many files (a save interrupted half-way), ``torn_last`` leaves the last one half-written.
    Returns the adapter directory."""
    adapter = os.path.join(save_dir, f"iter_{iteration:07d}", "adapter")
    os.makedirs(adapter, exist_ok=True)
    order = write_order(ranks, hf_export)
    todo = order if files is None else order[:files]
    for i, name in enumerate(todo):
        if name == "adapter_config.json":
            data = json.dumps(
                {"peft_type": "LORA", "r": 64, "lora_alpha": 32, "target_modules": ["q_proj"], "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM"},
                indent=2,
            ).encode()
        else:
            data = _torch_file(name, f"{name} of iteration {iteration}".encode())
        if torn_last and i == len(todo) - 1:
            data = data[: len(data) // 2]
        with open(os.path.join(adapter, name), "wb") as f:
            f.write(data)
    return adapter


def write_tree(save_dir: str, iterations: list, ranks: int) -> list:
    """Complete saves of ``iterations``; returns their adapter directories."""
    return [write_save(save_dir, it, ranks) for it in iterations]


def demo_lines(num_rollouts: int, eval_interval: int | None, save_interval: int, save_dir: str, seed: int = 7) -> list:
    """A quiet, well-formed attempt as text lines (for the demo's live display)."""
    log = attempt_log(num_rollouts, save_dir=save_dir, eval_interval=eval_interval, save_interval=save_interval, seed=seed, noise=False, datasets=("aime24",))
    return log.text_lines()


def finite(value: float) -> bool:
    return isinstance(value, float) and math.isfinite(value)
