"""parse_line / parse_metrics / eval_scores: one test per line shape, plus hostile input."""

from __future__ import annotations

import math
import random
import time

import pytest

HEADER = "[2026-11-30 08:30:00.123 MegatronTrainRayActor] model.py:660 - "
RAY = "(MegatronTrainRayActor pid=1234, ip=10.0.0.5) "
ANSI_RAY = "\x1b[36m(MegatronTrainRayActor pid=1234, ip=10.0.0.5)\x1b[0m "


@pytest.mark.parametrize("prefix", ["", RAY, ANSI_RAY])
@pytest.mark.parametrize("header", ["", HEADER])
def test_step_line_with_and_without_prefixes(reporter, prefix, header):
    line = (
        prefix
        + header
        + ("step 12: {'train/loss': 0.25, 'train/pg_loss': 0.2, 'train/ppo_kl': 0.001, 'train/train_rollout_logprob_abs_diff': 0.0123, 'train/step': 12}")
    )
    event = reporter.parse_line(line)
    assert event.kind == "step" and event.id == 12
    assert event.values["train/loss"] == 0.25
    assert event.values["train/train_rollout_logprob_abs_diff"] == 0.0123
    assert event.values["train/step"] == 12


def test_perf_line(reporter):
    event = reporter.parse_line(
        "[2026-11-30 08:30:00.123 RolloutManager] rollout.py:530 - perf 7: {'rollout/response_len/mean': 4096.5, "
        "'rollout/truncated_ratio': 0.125, 'perf/rollout_time': 201.0, 'rollout/zero_std/count_0.0': 3}\n"
    )
    assert event == reporter.Event(
        "perf", 7, {"rollout/response_len/mean": 4096.5, "rollout/truncated_ratio": 0.125, "perf/rollout_time": 201.0, "rollout/zero_std/count_0.0": 3.0}
    )


def test_train_perf_line_without_rollout_keys(reporter):
    event = reporter.parse_line(RAY + HEADER + "perf 7: {'perf/actor_train_time': 30.5, 'perf/step_time': 60.0}")
    assert event.kind == "perf" and event.id == 7 and event.values == {"perf/actor_train_time": 30.5, "perf/step_time": 60.0}


def test_rollout_line_with_nested_values(reporter):
    event = reporter.parse_line(
        RAY + HEADER + "rollout 3: {'rollout/raw_reward': 0.5, 'rollout/log_probs': -0.3, "
        "'rollout/hist': [1, 2, 3], 'rollout/meta': {'engine': 'sglang'}, 'rollout/name': 'x'}"
    )
    assert event.kind == "rollout" and event.id == 3
    assert event.values == {"rollout/raw_reward": 0.5, "rollout/log_probs": -0.3}


def test_eval_line(reporter):
    event = reporter.parse_line(HEADER + "eval 19: {'eval/aime24': 0.63, 'eval/aime24-truncated_ratio': 0.02, 'eval/aime24/response_len/mean': 9000.0}")
    assert event.kind == "eval" and event.id == 19
    assert reporter.eval_scores(event.values) == {"aime24": 0.63}


def test_eval_scores_rules(reporter):
    values = {
        "eval/aime24": 0.6,
        "eval/aime24-truncated_ratio": 0.1,
        "eval/aime24-pass@16": 0.9,
        "eval/aime24/response_len/mean": 5000.0,
        "eval/math-500": 0.7,
        "eval/math-500-truncated_ratio": 0.0,
        "eval/step": 20,
        "eval/": 1.0,
        "rollout/raw_reward": 0.3,
    }
    assert reporter.eval_scores(values) == {"aime24": 0.6, "math-500": 0.7}


@pytest.mark.parametrize(
    "line, iteration, path",
    [
        ("  successfully saved checkpoint from iteration      49 to /root/ckpt", 49, "/root/ckpt"),
        (RAY + "  successfully saved checkpoint from iteration    1234 to /a/b [ t 1/1, p 1/1 ]", 1234, "/a/b"),
        (ANSI_RAY + HEADER + "successfully saved checkpoint from iteration 7 to /x", 7, "/x"),
        ("successfully saved checkpoint from iteration       0", 0, None),
    ],
)
def test_checkpoint_line(reporter, line, iteration, path):
    assert reporter.parse_line(line) == reporter.Event("checkpoint", iteration, {}, path)


def test_numpy_reprs_and_non_finite_values_use_the_fallback(reporter):
    event = reporter.parse_line(
        HEADER + "step 4: {'train/loss': np.float64(0.5), 'train/ppo_kl': nan, "
        "'train/grad_norm': inf, 'train/x': -inf, 'train/y': tensor(1.5e-3), "
        "\"train/z\": -2, 'train/name': 'abc', 'train/flag': True}"
    )
    v = event.values
    assert v["train/loss"] == 0.5 and math.isnan(v["train/ppo_kl"]) and v["train/grad_norm"] == math.inf
    assert v["train/x"] == -math.inf and v["train/y"] == 1.5e-3 and v["train/z"] == -2.0
    assert "train/name" not in v


def test_truncated_dict_is_salvaged(reporter):
    event = reporter.parse_line(HEADER + "step 4: {'train/loss': 0.5, 'train/ppo_kl': 0.25, 'train/gra")
    assert event.values == {"train/loss": 0.5, "train/ppo_kl": 0.25}


@pytest.mark.parametrize("prefix", ["(pid=77) ", "(raylet, ip=10.0.0.5) ", "(TrainActor(rank=3) pid=9, ip=10.0.0.5) ", "\x1b[1m\x1b[36m(pid=77)\x1b[0m "])
def test_other_ray_prefixes(reporter, prefix):
    assert reporter.parse_line(prefix + HEADER + "step 4: {'train/loss': 0.5}").values == {"train/loss": 0.5}


def test_ray_dedup_suffix_is_ignored(reporter):
    event = reporter.parse_line(RAY + HEADER + "step 4: {'train/loss': 0.5} [repeated 3x across cluster]")
    assert event.values == {"train/loss": 0.5}


def test_bytes_input_with_invalid_utf8_and_crlf(reporter):
    line = (RAY + HEADER).encode() + b"step 4: {'train/loss': 0.5, 'train/note': '\xff\xfe'}\r\n"
    assert reporter.parse_line(line).values == {"train/loss": 0.5}


@pytest.mark.parametrize(
    "line",
    [
        "",
        "random noise",
        "    step 5: {'train/loss': 1.0}",  # indented: inside a traceback
        "ValueError: step 5: {'train/loss': 1.0}",
        "step 5: {'foo': 1.0}",  # wrong key family
        "rollout 5: {'train/loss': 1.0}",
        "eval 5: {'rollout/raw_reward': 1.0}",
        "critic-step 5: {'train/critic-loss': 1.0}",
        HEADER + "step five: {'train/loss': 1.0}",
        HEADER + "step 5 {'train/loss': 1.0}",
        HEADER + "step 5: {}",
        HEADER + "step 5: {'train/loss': 'not a number'}",
        "saving checkpoint at iteration      49 to /root/ckpt",
        "Rollout generation:  45%|\u2588\u2588\u258c   | 29/64 [00:12<00:15,  2.31it/s]",
    ],
)
def test_not_events(reporter, line):
    assert reporter.parse_line(line) is None


def test_parse_metrics_huge_and_deeply_nested(reporter):
    big = "{" + ", ".join(f"'perf/k{i}': {i}.5" for i in range(20000)) + "}"
    assert len(reporter.parse_metrics(big)) == 20000
    nested = "{'x': " + "[" * 50000 + "]" * 50000 + ", 'train/loss': 1.0}"
    start = time.monotonic()
    assert reporter.parse_metrics(nested)["train/loss"] == 1.0
    assert time.monotonic() - start < 10
    assert reporter.parse_metrics("{'a': 1e999, 'b': -1e999}") == {"a": math.inf, "b": -math.inf}
    assert reporter.parse_metrics("{'a': 10**400}")["a"] == 10.0  # not a literal: regex sees "10"


def test_parse_line_never_raises_on_garbage(reporter):
    rng = random.Random(7)
    alphabet = "{}[]()'\":, .-+eE0123456789naifstep rollout perf eval/\x1b\\\n\r\t\x00\u2588"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        for candidate in (text, "step 1: {" + text, HEADER + "eval 2: {'eval/a" + text):
            reporter.parse_line(candidate)
            reporter.parse_line(candidate.encode("utf-8", "replace") + bytes([rng.randrange(256)]))


def test_every_generated_event_line_parses(reporter, miles_log):
    """The source-faithful log: each step line twice, every rank announcing a save (some lines
    folded by Ray's dedup), evals at 0, 19, 39, ... and none forced after the last rollout."""
    kinds = {}
    for line in miles_log.lines:
        for segment in line.rstrip(b"\n").split(b"\r"):
            event = reporter.parse_line(segment)
            if event is not None:
                kinds[event.kind] = kinds.get(event.kind, 0) + 1
    n = miles_log.num_rollouts
    assert kinds == {"perf": 2 * n, "rollout": n, "step": 2 * n, "eval": len(miles_log.evals), "saving": 2 * len(miles_log.saves)}
    assert [r for r, _ in miles_log.evals] == [0, 19, 39, 59] + list(range(79, 300, 20))  # 299: a multiple, not forced


SAVE = "/root/shared_data/job/checkpoints/iter_0000049/adapter"


@pytest.mark.parametrize(
    "line, event",
    [
        (ANSI_RAY + "[2026-11-30 08:30:00.123 actor_cell0_rank0] checkpoint.py:160 - Saving LoRA checkpoint to " + SAVE, ("saving", 49, {}, SAVE)),
        (
            RAY + "[2026-11-30 08:30:00.123 actor_cell0_rank1] checkpoint.py:160 - Saving LoRA checkpoint to " + SAVE + " [repeated 7x across cluster]",
            ("saving", 49, {}, SAVE),
        ),
        (RAY + HEADER + "Resuming LoRA training from iteration 49", ("resumed", 49, {}, None)),
        (
            RAY + HEADER + f"LoRA is enabled and --lora-adapter-path={SAVE} was specified, but adapter weights could not be "
            "loaded. Training will start with freshly initialized adapter weights.",
            ("not_resumed", 0, {}, SAVE),
        ),
        (
            "wandb: \U0001f680 View run at \x1b[34m\x1b[4mhttps://wandb.ai/team/proj/runs/abc123\x1b[0m",
            ("wandb", 0, {}, "https://wandb.ai/team/proj/runs/abc123"),
        ),
        (
            "wandb:  View run at https://wandb.example.com/t/p/runs/r-1",  # no emoji on a non-UTF-8 stdout
            ("wandb", 0, {}, "https://wandb.example.com/t/p/runs/r-1"),
        ),
        (
            "wandb: \U0001f680 View run qwen3-4b-lora at: \x1b[34m\x1b[4mhttps://wandb.ai/t/p/runs/qwen3-4b-lora\x1b[0m",
            ("wandb", 0, {}, "https://wandb.ai/t/p/runs/qwen3-4b-lora"),
        ),
    ],
)
def test_lora_save_resume_and_wandb_lines(reporter, line, event):
    assert reporter.parse_line(line) == reporter.Event(*event)


@pytest.mark.parametrize(
    "line",
    [
        "wandb: \u2b50\ufe0f View project at https://wandb.ai/team/proj",
        RAY + HEADER + "Saved 504 adapter tensors (native) to " + SAVE + "/adapter_megatron_rank0.pt",
        RAY + HEADER + "Saved HF PEFT adapter to " + SAVE + " with 504 tensors",
        RAY + HEADER + "Saved optimizer/scheduler state to " + SAVE,
        HEADER + "eval 19 skipped: no_data",
    ],
)
def test_lines_that_are_not_events(reporter, line):
    assert reporter.parse_line(line) is None
