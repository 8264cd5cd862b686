"""A small synthetic miles training log (the formats in the recipe reference), for the demo.

The reporter's tests have a richer generator with noise and malformed lines; this one only
produces a plausible, well-formed run to drive the live status display.
"""

from __future__ import annotations

import datetime
import random
from typing import Iterator

ACTOR = "(MegatronTrainRayActor pid=4242, ip=10.0.0.5) "
MANAGER = "(RolloutManager pid=4243, ip=10.0.0.5) "


def _header(moment: datetime.datetime, where: str) -> str:
    return f"[{moment.strftime('%Y-%m-%d %H:%M:%S')}.{moment.microsecond // 1000:03d} {where}"


def lines(num_rollouts: int, eval_interval: int, save_interval: int, save_dir: str, seed: int = 7) -> Iterator[str]:
    rng = random.Random(seed)
    t = datetime.datetime(2026, 11, 30, 8, 0, 0)
    score = 0.5625
    for rollout in range(num_rollouts):
        if rollout % eval_interval == 0:
            yield f"{MANAGER}{_header(t, 'RolloutManager')}] rollout.py:312 - eval {rollout}: {{'eval/aime24': {score:.4f}, 'eval/aime24-truncated_ratio': 0.02}}"
        t += datetime.timedelta(seconds=150)
        reward = min(0.95, 0.35 + rollout * 0.004 + rng.uniform(-0.03, 0.03))
        yield (f"{MANAGER}{_header(t, 'RolloutManager')}] rollout.py:401 - perf {rollout}: "
               f"{{'rollout/response_len/mean': {3800 + rng.uniform(-300, 300):.1f}, 'rollout/truncated_ratio': {rng.uniform(0.0, 0.06):.4f}, 'perf/rollout_time': 118.2}}")
        yield f"{ACTOR}{_header(t, 'MegatronTrainRayActor')}] actor.py:233 - rollout {rollout}: {{'rollout/raw_reward': {reward:.4f}, 'rollout/log_probs': -0.41}}"
        t += datetime.timedelta(seconds=40)
        yield (f"{ACTOR}{_header(t, 'MegatronTrainRayActor')}] model.py:660 - step {rollout}: "
               f"{{'train/loss': {rng.uniform(-0.02, 0.02):.5f}, 'train/pg_loss': 0.0012, 'train/ppo_kl': {rng.uniform(0, 0.002):.6f}, "
               f"'train/train_rollout_logprob_abs_diff': {rng.uniform(0.010, 0.015):.5f}, 'train/grad_norm': 0.21, 'train/step': {rollout}}}")
        if (rollout + 1) % save_interval == 0 or rollout == num_rollouts - 1:
            yield f"{ACTOR}{_header(t, 'MegatronTrainRayActor')}] checkpointing.py:512 -  successfully saved checkpoint from iteration {rollout:7d} to {save_dir}"
        score = min(0.70, score + rng.uniform(-0.005, 0.01))
