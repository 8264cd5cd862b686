"""The Ray actors and tasks of a colocated miles run, reduced to what lorarl can see.

Roles and their log names as in miles 31f1ca9: the driver (``main``), the ``RolloutManager``
actor (``rollout_manager``; ray/placement_group.py:187-190), one SGLang engine per rollout GPU
(``SGLangEngine``, an actor for the run that runs ``generate`` on its share of each batch), and
one ``MegatronTrainRayActor`` per training GPU (``actor_cell0_rank<r>``;
ray/train/actor_factory.py:73-101). Which role prints which line,
and at which miles file:line, follows ``shared/reference/miles-lora-checkpoints-and-logs.md``.

The numbers are made up but move as a run's do: the chance that a sample is correct rises with
the optimizer steps the adapter has had (so a resumed adapter keeps its level), every reward is
0/1 as deepscaler's (so rollout/raw_reward is a multiple of 1/(batch x samples)), the
train/rollout logprob gap stays around 0.012.
"""

from __future__ import annotations

import math
import os
import random
import time

from . import lora_files
from .minilog import Log


def correct_chance(trained_steps: int) -> float:
    return 0.25 + 0.5 * (1.0 - math.exp(-trained_steps / 40.0))


def generate(seed: int, rollout_id: int, engine: int, n_prompts: int, n_samples: int, trained_steps: int, max_len: int, seconds: float, nan: bool) -> list:
    """One engine's share of a rollout: (reward, response_length, truncated) per sample."""
    rng = random.Random(f"{seed}/{rollout_id}/{engine}")
    p = min(0.98, max(0.02, correct_chance(trained_steps) + rng.uniform(-0.08, 0.08)))
    out = []
    for _ in range(n_prompts * n_samples):
        length = int(max_len * rng.uniform(0.15, 1.05))
        truncated = length >= max_len
        reward = float("nan") if nan else (1.0 if rng.random() < p and not truncated else 0.0)
        out.append((reward, min(length, max_len), truncated))
    if seconds:
        time.sleep(seconds)
    return out


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


class RolloutManager:
    """Splits each batch over the engines, runs them, logs ``perf <id>`` and ``eval <id>``."""

    def __init__(self, args, knobs, prompts: list, eval_sets: list, engines: int, dispatch, prefix: str = ""):
        self.args, self.knobs, self.prompts, self.eval_sets = args, knobs, prompts, eval_sets
        self.engines, self.dispatch = max(1, engines), dispatch
        self.log = Log("rollout_manager", prefix)
        self.cursor = 0

    def _split(self, n: int) -> list:
        base, extra = divmod(n, self.engines)
        return [base + (1 if e < extra else 0) for e in range(self.engines)]

    def generate(self, rollout_id: int, trained_steps: int) -> dict:
        started = time.time()
        args, knobs = self.args, self.knobs
        batch = args.rollout_batch_size
        self.cursor += batch  # prompts are taken in order, wrapping into the next epoch
        nan = knobs.nan_reward_from is not None and rollout_id >= knobs.nan_reward_from
        calls = [
            dict(
                seed=knobs.seed,
                rollout_id=rollout_id,
                engine=e,
                n_prompts=n,
                n_samples=args.n_samples_per_prompt,
                trained_steps=trained_steps,
                max_len=args.rollout_max_response_len or 8192,
                seconds=knobs.seconds_per_rollout,
                nan=nan,
            )
            for e, n in enumerate(self._split(batch))
            if n
        ]
        samples = [s for part in self.dispatch(generate, calls) for s in part]
        lengths = sorted(s[1] for s in samples)
        perf = {
            "rollout/response_len/mean": _mean(lengths),
            "rollout/response_len/median": float(lengths[len(lengths) // 2]) if lengths else 0.0,
            "rollout/truncated_ratio": _mean(1.0 if s[2] else 0.0 for s in samples),
            "rollout/repetition_frac": 0.0,
            "perf/rollout_time": time.time() - started,
            "perf/tokens_per_gpu_per_sec": sum(lengths) / max(1e-6, time.time() - started) / self.engines,
        }
        self.log.info("metrics.py:89", f"perf {rollout_id}: {perf}")  # ray/rollout/metrics.py:89-142
        return {"rewards": [s[0] for s in samples], "lengths": [s[1] for s in samples]}

    def eval(self, rollout_id: int, trained_steps: int) -> dict:
        args, knobs = self.args, self.knobs
        line = {}
        for index, (name, rows) in enumerate(self.eval_sets):
            calls = [
                dict(
                    seed=knobs.seed + 7919 * (index + 1),
                    rollout_id=rollout_id,
                    engine=e,
                    n_prompts=n,
                    n_samples=args.n_samples_per_eval_prompt,
                    trained_steps=trained_steps,
                    max_len=args.eval_max_response_len or args.rollout_max_response_len or 8192,
                    seconds=0.0,
                    nan=False,
                )
                for e, n in enumerate(self._split(len(rows)))
                if n
            ]
            samples = [s for part in self.dispatch(generate, calls) for s in part]
            line[f"eval/{name}"] = _mean(s[0] for s in samples)
            line[f"eval/{name}-truncated_ratio"] = _mean(1.0 if s[2] else 0.0 for s in samples)
            line[f"eval/{name}-none_reward_ratio"] = 0.0
            line[f"eval/{name}/response_len/mean"] = _mean(s[1] for s in samples)
        self.log.info("metrics.py:53", f"eval {rollout_id}: {line}")  # ray/rollout/metrics.py:53
        return line


class MegatronTrainRayActor:
    """One training rank: loads the adapter, trains (rank 0 logs the metrics), saves its files."""

    def __init__(self, args, knobs, rank: int, world: int, prefix: str = ""):
        self.args, self.knobs, self.rank, self.world = args, knobs, rank, world
        self.log = Log(f"actor_cell0_rank{rank}", prefix)
        self.trained_steps = 0
        self.rng = random.Random(f"{knobs.seed}/train/{rank}")

    def init(self, adapter_path) -> int:
        """checkpoint.py:130-151: restore the adapter if --lora-adapter-path names one."""
        if adapter_path is not None:
            result = lora_files.load(adapter_path, self.rank)
            for where, text in result.messages:
                self.log.info(where, text)
            if result.loaded:
                self.trained_steps = result.trained_steps
                self.log.info("checkpoint.py:141", f"Successfully loaded LoRA adapter from {adapter_path}")
            else:
                self.log.warning(
                    "checkpoint.py:145",
                    f"LoRA is enabled and --lora-adapter-path={adapter_path} was specified, but adapter "
                    f"weights could not be loaded. Training will start with freshly initialized adapter "
                    f"weights.",
                )
        return self.trained_steps

    def train(self, rollout_id: int, data: dict, steps_per_rollout: int) -> None:
        args, rng = self.args, self.rng
        rewards = data["rewards"]
        if self.rank == 0:  # training_utils/log_utils.py:122, 255: before the rollout is trained
            rollout = {
                "rollout/raw_reward": _mean(rewards),
                "rollout/rewards": 0.0,
                "rollout/log_probs": -0.3 - 0.05 * rng.random(),
                "rollout/rollout_log_probs": -0.3 - 0.05 * rng.random(),
                "rollout/response_lengths": _mean(data["lengths"]),
            }
            self.log.info("log_utils.py:123", f"rollout {rollout_id}: {rollout}")
        started = time.time()
        for step_id in range(steps_per_rollout):
            if self.knobs.seconds_per_step:
                time.sleep(self.knobs.seconds_per_step)
            self.trained_steps += 1
            n = rollout_id * steps_per_rollout + step_id  # log_utils.py:522
            loss = rng.uniform(-0.05, 0.05)
            step = {
                "train/loss": loss,
                "train/pg_loss": loss,
                "train/entropy_loss": 0.4 + 0.1 * rng.random(),
                "train/pg_clipfrac": rng.random() / 100,
                "train/ppo_kl": rng.random() / 1000,
                "train/train_rollout_logprob_abs_diff": 0.012 + rng.uniform(-0.002, 0.002),
                "train/train_rollout_kl": rng.random() / 1000,
                "train/grad_norm": 0.1 + rng.random() / 10,
                "train/lr-pg_0": args.lr,
                "train/step": n,
            }
            if self.rank == 0:  # printed twice by the same process: log_utils.py:542, model.py:854
                self.log.info("log_utils.py:542", f"step {n}: {step}")
                self.log.info("model.py:854", f"step {n}: {step}")
        if self.rank == 0:  # utils/train_metric_utils.py:56
            took = time.time() - started
            self.log.info(
                "train_metric_utils.py:56", f"perf {rollout_id}: { {'perf/actor_train_time': took, 'perf/step_time': took, 'perf/train_wait_time': 0.0} }"
            )

    # the three phases of save_lora_checkpoint (lora_utils.py:445-517); the caller keeps them apart
    def save_shard(self, rollout_id: int) -> None:
        adapter = lora_files.iter_dir(self.args.save, rollout_id)
        self.log.info("checkpoint.py:160", f"Saving LoRA checkpoint to {adapter}")
        count = lora_files.write_shard(adapter, self.rank, self.args, self.trained_steps)
        native = os.path.join(adapter, f"adapter_megatron_rank{self.rank}.pt")
        self.log.info("lora_utils.py:458", f"Saved {count} adapter tensors (native) to {native}")

    def save_hf(self, rollout_id: int) -> None:
        if self.rank != 0:
            return
        adapter = lora_files.iter_dir(self.args.save, rollout_id)
        count = lora_files.write_hf(adapter, self.args, data=bool(self.knobs.adapter_data), trained_steps=self.trained_steps)
        self.log.info("lora_utils.py:496", f"Saved HF PEFT adapter to {adapter} with {count} tensors")

    def save_state(self, rollout_id: int) -> None:
        adapter = lora_files.iter_dir(self.args.save, rollout_id)
        lora_files.write_state(adapter, self.rank, rollout_id, self.trained_steps, self.args.lr)
        self.log.info("lora_utils.py:514", f"Saved optimizer/scheduler state to {adapter}")
