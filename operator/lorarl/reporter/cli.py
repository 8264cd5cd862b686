"""``reporter.pyz --namespace NS --name JOB --total-rollouts N [--save-dir DIR] [--gpus G]
[--steps-per-rollout S] [--interval 15] [--resume] -- python3 train.py ARGS...``

Claims this attempt on the volume and decides its command (``launcher``), runs the trainer
(``supervise``), and reports its progress (``summary`` + ``schedule``). Reporting problems
never change the trainer's exit code; bad reporter options disable reporting, not the run.
With ``LORARL_STATUS_SPOOL`` set (the trainer's container holds no API token) the statuses go to
that spool, and ``reporter.pyz sidecar ...`` in the token's container sends them (``spool``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import attempts, checkpoints, launcher, oom, spool, supervise
from .kubeapi import Patcher, api_config
from .logparse import parse_line
from .notes import PREFIX, warn
from .schedule import Reporter, Sender
from .summary import Summary


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # raise instead of exiting
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="reporter.pyz",
        description="Run the miles trainer, resume it from the newest complete checkpoint on a retry, and report its progress to the LoraRLJob status.",
        usage="%(prog)s --namespace NS --name JOB --total-rollouts N [--save-dir DIR] [--gpus G] "
        "[--steps-per-rollout S] [--interval SECONDS] [--resume] -- COMMAND [ARGS...]",
    )
    p.add_argument("--namespace", required=True, help="namespace of the LoraRLJob")
    p.add_argument("--name", required=True, help="name of the LoraRLJob")
    p.add_argument("--total-rollouts", required=True, type=int, help="num_rollout of the whole run")
    p.add_argument("--save-dir", default=None, help="the trainer's --save directory (attempts and checkpoints)")
    p.add_argument("--gpus", default=0, type=int, help="GPUs of the job = training ranks (nodes x GPUs per node)")
    p.add_argument("--steps-per-rollout", default=1, type=int, help="optimizer steps per rollout")
    p.add_argument("--interval", default=15.0, type=float, help="minimum seconds between patches (15)")
    p.add_argument("--resume", action="store_true", help="on attempt 2 and later, continue from the newest complete checkpoint")
    return p


def split_argv(argv: list) -> tuple:
    if "--" in argv:
        split = argv.index("--")
        return argv[:split], argv[split + 1 :]
    return argv, []


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sidecar"]:
        return spool.sidecar_main(argv[1:])
    option_args, command = split_argv(argv)
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
            raise UsageError("-h/--help given together with a command")
        opts = parser.parse_args(option_args)
    except UsageError as exc:
        warn(f"bad reporter options ({exc}); running the command without status reporting")

    forwarder = supervise.SignalForwarder()
    if opts is None:
        return supervise.run(command, forwarder, lambda line: None)

    plan = None
    if opts.save_dir:
        try:
            plan = launcher.plan(command, opts.save_dir, opts.total_rollouts, opts.gpus, opts.gpus, opts.resume, time.time())
        except Exception as exc:  # an unwritable volume must not stop the run
            warn(f"cannot record the attempt under {opts.save_dir} ({type(exc).__name__}: {exc}); running the command as given, without resume")
    if plan is not None and plan.attempt > 1:
        source = f"from {plan.adapter}" if plan.adapter else "from scratch (no complete checkpoint)"
        warn(
            f"attempt {plan.attempt}: {plan.offset} of {opts.total_rollouts} rollouts done; resuming {source}; "
            f"saving to {plan.save_dir} with --num-rollout {plan.num_rollout}"
        )
        command = plan.argv

    reporter = None
    try:
        reporter = make_reporter(opts, plan, eval_sets(command))
    except Exception as exc:
        warn(f"status reporting disabled: {type(exc).__name__}: {exc}"[:300])

    if plan is not None and plan.attempt > 1 and plan.num_rollout == 0:
        warn(f"attempt {plan.attempt}: all {opts.total_rollouts} rollouts are done and saved; not starting the trainer")
        code = 0
    else:
        if reporter is not None:
            reporter.start()
        kills = oom.kills()
        code = supervise.run(command, forwarder, on_line_for(reporter))
        if oom.killed(code, kills, oom.kills()):
            warn(oom.MARKER)
        if code == 0 and plan is not None and plan.offset > 0 and reporter is not None and not reporter.summary.saw_rollouts:
            # miles 31f1ca9 restarts at rollout 0; a trainer that continued at the resumed
            # iteration instead would see --num-rollout below its start and train nothing.
            warn(
                f"attempt {plan.attempt}: the trainer exited 0 without training a rollout after resuming from "
                f"{plan.adapter} with --num-rollout {plan.num_rollout}; failing the attempt instead of "
                "reporting success (does this miles continue at the checkpoint's iteration + 1?)"
            )
            code = 1
    if reporter is not None:
        try:
            reporter.finish()
        except Exception as exc:
            warn(f"final status report failed: {type(exc).__name__}: {exc}"[:300])
    return code


def on_line_for(reporter):
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

    return on_line


def eval_sets(command: list) -> frozenset | None:
    """The eval set names the trainer was given (``--eval-prompt-data NAME PATH [NAME PATH ...]``,
    as the renderer writes it from spec.eval.datasets), or None when it was given none. The job-status
    policy admits only those names: an eval line of another name would get the whole patch refused."""
    if "--eval-prompt-data" not in command:
        return None
    values = []
    for word in command[command.index("--eval-prompt-data") + 1 :]:
        if word.startswith("--"):
            break
        values.append(word)
    return frozenset(values[0::2])


def make_reporter(opts, plan, eval_names: frozenset | None = None) -> Reporter:
    history = attempts.read_all(opts.save_dir) if plan is not None else []
    summary = Summary(
        opts.total_rollouts,
        offset=plan.offset if plan else 0,
        attempt=plan.attempt if plan else 1,
        steps_per_rollout=opts.steps_per_rollout,
        history=history,
        eval_names=eval_names,
    )
    config = api_config()
    patcher: Sender | None = None
    spool_dir = os.environ.get(spool.SPOOL_ENV, "").strip()
    if spool_dir:  # the token is in the sidecar, not here
        patcher = spool.SpoolPatcher(spool_dir, f"{opts.namespace}/{opts.name}")
    elif config is None:
        warn("no Kubernetes API configured (KUBERNETES_SERVICE_HOST or LORARL_API_SERVER); status reporting disabled")
    else:
        patcher = Patcher(config, opts.namespace, opts.name)
    scan = heartbeat = None
    if opts.save_dir:
        save_root = opts.save_dir
        current_dir = plan.save_dir if plan else save_root

        def scan():
            dirs = launcher.save_dirs(save_root, attempts.read_all(save_root))
            saves = checkpoints.scan(dirs, opts.gpus)
            return None if saves is None else (saves, current_dir)

    if plan is not None:
        record = dict(plan.record)

        def heartbeat(fields: dict) -> None:
            record.update(fields, aliveAt=time.time())
            attempts.update(opts.save_dir, record)

    return Reporter(summary, patcher, opts.interval, scan=scan, heartbeat=heartbeat)
