"""The driver: miles' train.py loop (train.py:22-150 at 31f1ca9) over the stand-in's actors.

What it keeps from miles, where lorarl can see it:
* argv parsed by the real option table (options.py), the HF config checked against it, the
  prompt and eval data read (inputs.py), all before anything runs;
* bridge mode without ``latest_checkpointed_iteration.txt`` under ``--load`` starts at rollout 0
  whatever ``--start-rollout-id`` says (utils/arguments.py:3035-3045); ``--lora-adapter-path``
  restores the adapter per rank (lora_files.load) but not the loop position;
* ``for rollout_id in range(start, num_rollout)``: eval before the first rollout (unless
  --skip-eval-before-train), generate, train, save when (id + 1) % save_interval == 0 or id is
  the last (utils/misc.py:130-151, with the epoch boundary when --num-rollout is derived from
  --num-epoch), eval when (id + 1) % eval_interval == 0 (never forced at the end);
* saves in save_lora_checkpoint's order: every rank's shard, rank 0's HF files, every rank's
  training state, each phase finished before the next (the barriers of lora_utils.py:445-517).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback

from . import executor as executors
from . import inputs, options
from . import knobs as knobs_mod
from .minilog import Log
from .workers import MegatronTrainRayActor, RolloutManager


def periodic(rollout_id: int, interval, per_epoch=None, num_rollout=None) -> bool:
    """utils/misc.py:130-151 (should_run_periodic_action)."""
    if interval is None:
        return False
    if num_rollout is not None and rollout_id == num_rollout - 1:
        return True
    step = rollout_id + 1
    return step % interval == 0 or (per_epoch is not None and step % per_epoch == 0)


def steps_per_rollout(args) -> int:
    if args.num_steps_per_rollout:
        return args.num_steps_per_rollout
    if args.global_batch_size:
        return max(1, args.rollout_batch_size * args.n_samples_per_prompt // args.global_batch_size)
    return 1


def start_rollout_id(args) -> int:
    if args.megatron_to_hf_mode == "bridge":
        if args.load is None or not os.path.exists(os.path.join(args.load, "latest_checkpointed_iteration.txt")):
            return 0
    return args.start_rollout_id or 0


class Faults:
    """The standin.json fault knobs, checked when each rollout starts."""

    def __init__(self, knobs, save, log: Log):
        self.knobs, self.save, self.log = knobs, save, log
        self.hoard = []

    def at_rollout(self, rollout_id: int) -> None:
        k = self.knobs
        if k.allocate_mib and rollout_id == k.allocate_at_rollout:
            block = bytearray(k.allocate_mib << 20)
            for i in range(0, len(block), 4096):  # touch every page: resident, not just reserved
                block[i] = 1
            self.hoard.append(block)
            self.log.info("train.py:95", f"standin.json: allocated {k.allocate_mib} MiB")
        for name, fault in k.faults.items():
            if not knobs_mod.should_fire(name, fault, rollout_id, self.save):
                continue
            self.log.info("train.py:95", f"standin.json: {name}={rollout_id}")
            if name == "exit_at_rollout":
                raise RuntimeError(f"standin.json: exit_at_rollout={rollout_id}")
            if name == "sigkill_at_rollout":
                os.kill(os.getpid(), signal.SIGKILL)
            if name == "hang_at_rollout":
                threading.Event().wait()


def train(args, knobs, run) -> None:
    log = Log("main")
    prompts = inputs.read_dataset(args.prompt_data, args.input_key, args.label_key) if args.prompt_data else []
    eval_sets = inputs.eval_datasets(args) if args.eval_prompt_data else []
    per_epoch = None
    if args.num_rollout is None:  # placement_group.py:193-197
        per_epoch = len(prompts) // args.rollout_batch_size
        args.num_rollout = per_epoch * (args.num_epoch or 1)
        assert args.num_rollout > 0
    start = start_rollout_id(args)
    args.start_rollout_id = start
    if args.lora_adapter_path and knobs.resumed_seconds_per_rollout is not None:
        knobs.seconds_per_rollout = knobs.resumed_seconds_per_rollout  # a resume's own pace (knobs.py)
    actor_gpus = args.actor_num_nodes * args.actor_num_gpus_per_node
    rollout_gpus = args.rollout_num_gpus or actor_gpus
    num_gpus = max(actor_gpus, rollout_gpus) if args.colocate else actor_gpus + rollout_gpus
    cluster = run.cluster_gpus()
    if cluster is not None:
        log.info("placement_group.py:113", f"Ray cluster resources: GPU={cluster:g}")
    log.info("placement_group.py:113", f"Creating placement group with {num_gpus} GPUs...")
    run.placement_group(num_gpus)
    engines = max(1, rollout_gpus // max(1, args.rollout_num_gpus_per_engine))
    manager = run.rollout_manager(RolloutManager, args, knobs, prompts, eval_sets, engines)
    actors = [run.train_actor(MegatronTrainRayActor, r, args, knobs, r, actor_gpus) for r in range(actor_gpus)]
    trained = run.call_all(actors, "init", args.lora_adapter_path)[0]
    faults = Faults(knobs, args.save, log)
    steps = steps_per_rollout(args)

    if args.num_rollout == 0 and args.eval_interval is not None:
        run.call(manager, "eval", 0, trained)
    for rollout_id in range(start, args.num_rollout):
        faults.at_rollout(rollout_id)
        if args.eval_interval is not None and rollout_id == start and not args.skip_eval_before_train:
            run.call(manager, "eval", rollout_id, trained)
        data = run.call(manager, "generate", rollout_id, trained)
        run.call_all(actors, "train", rollout_id, data, steps)
        trained += steps
        if args.save and periodic(rollout_id, args.save_interval, per_epoch, args.num_rollout):
            for phase in ("save_shard", "save_hf", "save_state"):
                run.call_all(actors, phase, rollout_id)
        if periodic(rollout_id, args.eval_interval, per_epoch):
            run.call(manager, "eval", rollout_id, trained)
        if args.debug_exit_after_rollout is not None and rollout_id - start + 1 >= args.debug_exit_after_rollout:
            log.info("train.py:143", f"debug_exit_after_rollout={args.debug_exit_after_rollout} reached at rollout_id={rollout_id}, exiting")
            break
    run.finish()


def main(argv: list) -> int:
    args = options.parse(argv)  # exits 2 on what miles' parser refuses
    try:
        if args.hf_checkpoint:
            inputs.hf_validate_args(args, inputs.load_hf_config(args.hf_checkpoint))
        knobs = knobs_mod.load(args.hf_checkpoint) if args.hf_checkpoint else knobs_mod.Knobs()
        run = executors.make(knobs)
        train(args, knobs, run)
    except (executors.StandinError, knobs_mod.KnobError) as exc:
        print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception:  # as an uncaught exception in miles: its traceback, exit 1
        traceback.print_exc()
        sys.stderr.flush()
        return 1
    return 0
