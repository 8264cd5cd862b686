"""The trainer stand-in's log and checkpoints, read by lorarl's own reporter code (its log parser
and checkpoint scanner, both written from miles' source, are the oracle), and its resume and
failure knobs. Inline executor: no Ray cluster (tests/standins/test_trainer_ray.py runs in Ray)."""

from __future__ import annotations

import json
import math
import os
import pathlib
import signal
import subprocess
import sys

import pytest
from lorarl.reporter import checkpoints

from tests.helpers import wait_for
from tests.standins.standin_lib import TRAIN_PY, events, of_kind, run_trainer, seed_inputs

RANKS = 8  # the seed: --actor-num-nodes 1 x --actor-num-gpus-per-node 8


def flag(argv, name):
    return argv[argv.index(name) + 1]


@pytest.fixture
def seed(tmp_path):
    return seed_inputs(tmp_path), tmp_path


def short(argv, rollouts=5, save_interval=2, eval_interval=2):
    return argv + ["--num-rollout", str(rollouts), "--save-interval", str(save_interval), "--eval-interval", str(eval_interval)]


def test_log_is_read_by_the_reporter_as_miles_log(seed):
    argv, _ = seed
    result = run_trainer(short(argv))
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(result.stderr)
    rollouts = of_kind(evs, "rollout")
    assert [e.id for e in rollouts] == [0, 1, 2, 3, 4]
    rewards = [e.values["rollout/raw_reward"] for e in rollouts]
    assert all(0.0 <= r <= 1.0 and (r * 64).is_integer() for r in rewards)  # 0/1 rewards over 8 x 8 samples
    steps = of_kind(evs, "step")
    assert [e.id for e in steps] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]  # each printed twice
    assert all(abs(e.values["train/train_rollout_logprob_abs_diff"] - 0.012) < 0.003 for e in steps)
    perfs = of_kind(evs, "perf")
    assert [e.id for e in perfs] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert all(any(k.startswith("rollout/") for k in e.values) for e in perfs[::2])
    assert all(all(k.startswith("perf/") for k in e.values) for e in perfs[1::2])
    assert [e.id for e in of_kind(evs, "eval")] == [0, 1, 3]  # before training, then (id+1) % 2 == 0; none forced at 4
    assert all(0.0 <= e.values["eval/aime24"] <= 1.0 for e in of_kind(evs, "eval"))
    assert [e.id for e in of_kind(evs, "saving")] == [1] * RANKS + [3] * RANKS + [4] * RANKS
    assert "(MegatronTrainRayActor pid=" in result.stderr and "(RolloutManager pid=" in result.stderr
    order = [e.kind for e in evs if e.id == 1 and e.kind != "step"]
    assert order[:3] == ["perf", "rollout", "perf"] and order[-1] == "eval"


def test_reward_rises_over_a_longer_run(tmp_path):
    argv = seed_inputs(tmp_path)
    result = run_trainer(short(argv, rollouts=60, save_interval=100, eval_interval=100))
    assert result.returncode == 0, result.stderr[-3000:]
    rewards = [e.values["rollout/raw_reward"] for e in of_kind(events(result.stderr), "rollout")]
    assert sum(rewards[-10:]) / 10 > sum(rewards[:10]) / 10 + 0.15


def test_checkpoint_files_and_order(seed):
    argv, _ = seed
    result = run_trainer(short(argv))
    assert result.returncode == 0, result.stderr[-3000:]
    save = flag(argv, "--save")
    saves = checkpoints.scan([checkpoints.SaveDir(1, save, 0)], RANKS)
    assert [(s.local, s.files_complete) for s in saves] == [(1, True), (3, True), (4, True)]
    adapter = pathlib.Path(save) / "iter_0000003" / "adapter"
    files = sorted(adapter.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    expected = (
        [f"adapter_megatron_rank{r}.pt" for r in range(RANKS)]
        + ["adapter_model.bin", "adapter_config.json"]
        + [f"training_state_rank{r}.pt" for r in range(RANKS)]
    )
    assert [p.name for p in files] == expected
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config == {
        "peft_type": "LORA",
        "r": 64,
        "lora_alpha": 32,
        "lora_dropout": 0.0,
        "bias": "none",
        "task_type": "CAUSAL_LM",
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    }
    assert not (pathlib.Path(save) / "latest_checkpointed_iteration.txt").exists()
    # 36 layers x 4 Megatron modules x (A, B); the PEFT export splits qkv and fc1: 36 x 7 x 2
    assert "Saved 288 adapter tensors (native) to " in result.stderr
    assert f"Saved HF PEFT adapter to {adapter} with 504 tensors" in result.stderr
    assert result.stderr.count(f"Saved optimizer/scheduler state to {adapter}") == RANKS


def test_resume_restores_the_adapter_and_restarts_at_rollout_0(seed):
    argv, tmp = seed
    assert run_trainer(short(argv)).returncode == 0
    adapter = str(pathlib.Path(flag(argv, "--save")) / "iter_0000003" / "adapter")
    second = run_trainer(short(argv, rollouts=2) + ["--save", str(tmp / "attempt-002"), "--lora-adapter-path", adapter])
    assert second.returncode == 0, second.stderr[-3000:]
    evs = events(second.stderr)
    assert [e.id for e in of_kind(evs, "resumed")] == [3] * RANKS
    assert of_kind(evs, "not_resumed") == []
    assert [e.id for e in of_kind(evs, "rollout")] == [0, 1]  # bridge mode without --load: from 0 again
    assert [e.id for e in of_kind(evs, "eval")] == [0, 1]
    assert f"Successfully loaded LoRA adapter from {adapter}" in second.stderr


def test_a_resumed_attempt_runs_at_its_own_pace(seed):
    """``resumed_seconds_per_rollout`` paces an attempt that restores an adapter: at the first
    attempt's 600 s a rollout the resume would outlast run_trainer's 120 s timeout."""
    argv, tmp = seed
    assert run_trainer(short(argv, rollouts=4)).returncode == 0
    (pathlib.Path(flag(argv, "--hf-checkpoint")) / "standin.json").write_text(json.dumps({"seconds_per_rollout": 600, "resumed_seconds_per_rollout": 0}))
    adapter = str(pathlib.Path(flag(argv, "--save")) / "iter_0000003" / "adapter")
    resumed = run_trainer(short(argv, rollouts=2) + ["--save", str(tmp / "attempt-002"), "--lora-adapter-path", adapter])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [e.id for e in of_kind(events(resumed.stderr), "rollout")] == [0, 1]


def test_resume_needs_every_ranks_megatron_shard(seed):
    argv, tmp = seed
    assert run_trainer(short(argv)).returncode == 0
    adapter = pathlib.Path(flag(argv, "--save")) / "iter_0000003" / "adapter"
    (adapter / "adapter_megatron_rank5.pt").unlink()
    result = run_trainer(short(argv, rollouts=1) + ["--save", str(tmp / "a2"), "--lora-adapter-path", str(adapter)])
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(result.stderr)
    assert len(of_kind(evs, "resumed")) == RANKS - 1
    assert [e.path for e in of_kind(evs, "not_resumed")] == [str(adapter)]
    assert "Found HF PEFT adapter at" in result.stderr  # rank 5 finds only the HF export, which miles cannot load


def test_an_hf_only_adapter_is_refused_and_training_starts_fresh(seed):
    argv, tmp = seed
    assert run_trainer(short(argv)).returncode == 0
    adapter = pathlib.Path(flag(argv, "--save")) / "iter_0000003" / "adapter"
    for shard in adapter.glob("adapter_megatron_rank*.pt"):
        shard.unlink()
    result = run_trainer(short(argv, rollouts=1) + ["--save", str(tmp / "a2"), "--lora-adapter-path", str(adapter)])
    assert result.returncode == 0
    evs = events(result.stderr)
    assert of_kind(evs, "resumed") == [] and len(of_kind(evs, "not_resumed")) == RANKS
    missing = run_trainer(short(argv, rollouts=1) + ["--save", str(tmp / "a3"), "--lora-adapter-path", str(tmp / "nope")])
    assert "LoRA adapter path does not exist" in missing.stderr and len(of_kind(events(missing.stderr), "not_resumed")) == RANKS


def test_a_torn_shard_fails_as_torch_load_does(seed):
    argv, tmp = seed
    assert run_trainer(short(argv)).returncode == 0
    shard = pathlib.Path(flag(argv, "--save")) / "iter_0000003" / "adapter" / "adapter_megatron_rank0.pt"
    shard.write_bytes(shard.read_bytes()[:100])
    result = run_trainer(short(argv, rollouts=1) + ["--save", str(tmp / "a2"), "--lora-adapter-path", str(shard.parent)])
    assert result.returncode == 1 and "PytorchStreamReader failed reading zip archive" in result.stderr


def knobbed(tmp_path, knobs):
    return seed_inputs(tmp_path, knobs={"seconds_per_rollout": 0, **knobs})


def test_exit_at_rollout(tmp_path):
    argv = knobbed(tmp_path, {"exit_at_rollout": 2})
    result = run_trainer(short(argv))
    assert result.returncode == 1 and "RuntimeError: standin.json: exit_at_rollout=2" in result.stderr
    assert [e.id for e in of_kind(events(result.stderr), "rollout")] == [0, 1]


def test_a_fault_limited_to_one_attempt_fires_once(tmp_path):
    argv = knobbed(tmp_path, {"exit_at_rollout": {"rollout": 1, "times": 1}})
    assert run_trainer(short(argv)).returncode == 1
    again = run_trainer(short(argv) + ["--save", flag(argv, "--save") + "/attempt-002"])
    assert again.returncode == 0, again.stderr[-2000:]


def test_sigkill_at_rollout(tmp_path):
    argv = knobbed(tmp_path, {"sigkill_at_rollout": 3})
    result = run_trainer(short(argv))
    assert result.returncode == -signal.SIGKILL
    assert [e.id for e in of_kind(events(result.stderr), "rollout")] == [0, 1, 2]


def test_nan_reward_from(tmp_path):
    argv = knobbed(tmp_path, {"nan_reward_from": 2})
    result = run_trainer(short(argv))
    assert result.returncode == 0
    rewards = [e.values["rollout/raw_reward"] for e in of_kind(events(result.stderr), "rollout")]
    assert [math.isnan(r) for r in rewards] == [False, False, True, True, True]


def test_hang_at_rollout_stays_alive(tmp_path):
    argv = knobbed(tmp_path, {"hang_at_rollout": 1})
    log = tmp_path / "stderr"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(TRAIN_PY), *short(argv)], stderr=err, stdout=subprocess.DEVNULL, env={**os.environ, "MILES_STANDIN_EXECUTOR": "inline"}
        )
    try:
        wait_for(lambda: "standin.json: hang_at_rollout=1" in log.read_text(), what="the hang to start")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_allocate_mib(tmp_path):
    argv = knobbed(tmp_path, {"allocate_mib": 64, "allocate_at_rollout": 1})
    result = run_trainer(short(argv, rollouts=2))
    assert result.returncode == 0 and "standin.json: allocated 64 MiB" in result.stderr


def test_a_bad_knob_file_names_the_key(tmp_path):
    argv = knobbed(tmp_path, {"exit_at_rolout": 2})
    result = run_trainer(short(argv))
    assert result.returncode == 1 and "standin.json: unknown key 'exit_at_rolout'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "break_it, message",
    [
        (lambda argv: os.remove(os.path.join(flag(argv, "--hf-checkpoint"), "config.json")), "does not appear to have a file named config.json"),
        (lambda argv: os.remove(flag(argv, "--prompt-data")), "FileNotFoundError: Prompt dataset path"),
        (lambda argv: os.remove(argv[argv.index("--eval-prompt-data") + 2]), "FileNotFoundError: Prompt dataset path"),
    ],
)
def test_missing_inputs_fail_as_miles_fails(tmp_path, break_it, message):
    argv = seed_inputs(tmp_path)
    break_it(argv)
    result = run_trainer(short(argv))
    assert result.returncode == 1 and message in result.stderr


def test_model_flags_are_checked_against_config_json(tmp_path):
    argv = seed_inputs(tmp_path)
    result = run_trainer(short(argv) + ["--num-layers", "28"])
    assert result.returncode == 1
    assert (
        "AssertionError: hf_validate_args failed: num_hidden_layers in hf config 36 is not equal to num_layers 28, please check the config."
    ) in result.stderr


def test_without_ray_it_fails_loudly(tmp_path):
    argv = seed_inputs(tmp_path)
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray (test)')\n")
    result = run_trainer(short(argv), inline=False, env={"PYTHONPATH": str(fake.parent), "MILES_STANDIN_EXECUTOR": "ray"})
    assert result.returncode == 1
    assert "runs its rollouts in Ray, and ray cannot be imported" in result.stderr
    assert of_kind(events(result.stderr), "rollout") == []


def test_adapter_data_knob_writes_a_peft_export_the_real_exporter_converts(tmp_path):
    """With ``adapter_data`` rank 0's adapter_model.bin holds the tensors (torch.save's layout):
    lorarl's exporter (its restricted reader, the checks against the spec) converts the save, and
    the real safetensors library reads every tensor back with the spec's shapes."""
    import datetime

    from lorarl.adapter import export
    from lorarl.job import command, export_plan
    from lorarl_dev import hubstub
    from safetensors import safe_open

    from tests.helpers import job_from, seed_doc

    doc = seed_doc()
    doc["spec"]["model"]["architecture"] = hubstub.TINY_ARCHITECTURE
    doc["spec"]["lora"] = {"rank": 8, "alpha": 16}
    doc["spec"]["export"] = {"destinations": [{"claim": {"claimName": "served"}}]}
    job = job_from(doc)
    tiny_flags = command.train_argv(job)[2:]
    argv = seed_inputs(tmp_path, knobs={"seconds_per_rollout": 0, "adapter_data": 1})
    pathlib.Path(flag(argv, "--hf-checkpoint"), "config.json").write_text(json.dumps(hubstub.tiny_config()))  # the model those flags describe
    overrides = [
        a
        for name in (
            "--num-layers",
            "--hidden-size",
            "--ffn-hidden-size",
            "--num-attention-heads",
            "--num-query-groups",
            "--kv-channels",
            "--lora-rank",
            "--lora-alpha",
        )
        for a in (name, flag(tiny_flags, name))
    ]
    result = run_trainer(short(argv, rollouts=2, save_interval=2) + overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    report = export.run(export_plan.export_plan(job), {}, flag(argv, "--save"), datetime.datetime.now(datetime.UTC), claim_root=str(tmp_path / "mnt"))
    assert report["ok"], report
    (exported,) = pathlib.Path(tmp_path / "mnt").rglob("adapter_model.safetensors")
    with safe_open(str(exported), "np") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
    assert len(shapes) == 2 * 7 * 2 and shapes["base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"] == (8, 64)
