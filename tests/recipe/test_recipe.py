"""The seed example renders the recorded recipe's train.py flags, block by block."""

from __future__ import annotations

import pathlib
import re
import shlex

import pytest
from lorarl.job import command, paths

from tests.helpers import REPO, job_from, seed_doc, with_spec

RECORDED = pathlib.Path(__file__).with_name("recorded_train_args.txt")
REFERENCE = REPO.parent / "shared" / "reference" / "recipe-qwen3-4b-lora-amd.md"
BLOCK_HEAD = re.compile(r"^(?P<name>[a-z]+)(?: \([^)]*\))?:\s+(?P<rest>.*)$")


def parse_blocks(text: str) -> dict[str, list[str]]:
    """Recorded block text -> {block name: tokens}; the '(+ free-form ...)' note is skipped."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#") or line.strip().startswith("("):
            continue
        head = BLOCK_HEAD.match(line)
        if head:
            current = head["name"]
            blocks[current] = shlex.split(head["rest"].split("[", 1)[0])
        else:
            blocks[current] += shlex.split(line.split("[", 1)[0])
    return blocks


def same_value(ours: str, recorded: str) -> bool:
    """Tokens are equal, or equal numbers written differently (0.00 vs 0.0, 1 vs 1.0)."""
    if ours == recorded:
        return True
    try:
        return float(ours) == float(recorded)
    except ValueError:
        return False


def assert_block_equal(ours: list[str], recorded: list[str], name: str) -> None:
    assert len(ours) == len(recorded), f"{name}: {ours} != {recorded}"
    for i, (a, b) in enumerate(zip(ours, recorded, strict=False)):
        assert same_value(a, b), f"{name}[{i}]: rendered {a!r}, recorded {b!r}"


RECORDED_BLOCKS = parse_blocks(RECORDED.read_text())
SEED_NAME = seed_doc()["metadata"]["name"]

# The recipe runs on one user's machine and names input directories by the repository's last
# path part. The operator's volumes may be shared by many jobs, so it keys them by repository
# and revision (lorarl.job.paths.input_dir; tests/prepare). These are the seed's directories and
# the recipe's, written out: the comparison maps ours to the recipe's and nothing else, and
# test_only_input_directories_and_number_spelling_differ pins that this is the whole difference.
KEYED_TO_RECIPE = (
    ("/root/models/Qwen/Qwen3-4B/main", "/root/models/Qwen3-4B"),
    ("/root/datasets/zhuzilin/dapo-math-17k/main", "/root/datasets/dapo-math-17k"),
    ("/root/datasets/zhuzilin/aime-2024/main", "/root/datasets/aime-2024"),
)


def as_recipe_path(token: str) -> str:
    for ours, recipe in KEYED_TO_RECIPE:
        if token == ours or token.startswith(ours + "/"):
            return recipe + token[len(ours) :]
    return token


def seed_blocks() -> dict[str, list[str]]:
    """The seed's train.py blocks with input directories written as the recipe writes them."""
    return {name: [as_recipe_path(t) for t in block] for name, block in command.train_blocks(job_from(seed_doc()))}


def test_recorded_copy_matches_reference():
    if not REFERENCE.exists():
        pytest.skip("shared/reference is not beside this clone")
    text = REFERENCE.read_text()
    start = text.index("train.py arguments, in order, block by block:")
    reference_block = text[start:].split("```", 2)[1]
    assert parse_blocks(reference_block) == RECORDED_BLOCKS


def test_block_order_is_the_recipes():
    ours = [name for name, _ in command.train_blocks(job_from(seed_doc()))]
    recorded = [name for name in RECORDED_BLOCKS if name != "wandb"]  # wandb only with a key
    assert ours == recorded


@pytest.mark.parametrize("name", [n for n in RECORDED_BLOCKS if n != "wandb"])
def test_seed_block_matches_recording(name):
    ours = seed_blocks()[name]
    recorded = [t.replace("<run_id>", SEED_NAME) for t in RECORDED_BLOCKS[name]]
    assert_block_equal(ours, recorded, name)


def test_only_input_directories_and_number_spelling_differ():
    """The only textual differences from the recording: the keyed input directories (mapped
    above) and numbers the YAML cannot keep apart."""
    ours = [t for _, b in command.train_blocks(job_from(seed_doc())) for t in b]
    recorded = [t.replace("<run_id>", SEED_NAME) for n, b in RECORDED_BLOCKS.items() if n != "wandb" for t in b]
    assert len(ours) == len(recorded)
    differing = {(a, b) for a, b in zip(ours, recorded, strict=False) if a != b}
    assert differing == {
        ("1.0", "1"),
        ("0.0", "0.00"),
        ("/root/models/Qwen/Qwen3-4B/main", "/root/models/Qwen3-4B"),
        ("/root/datasets/zhuzilin/dapo-math-17k/main/dapo-math-17k.jsonl", "/root/datasets/dapo-math-17k/dapo-math-17k.jsonl"),
        ("/root/datasets/zhuzilin/aime-2024/main/aime-2024.jsonl", "/root/datasets/aime-2024/aime-2024.jsonl"),
    }


def test_wandb_block_is_the_recording_without_the_key():
    doc = with_spec(tracking={"wandb": {"team": "rl", "apiKeySecretRef": {"name": "wandb", "key": "api-key"}}})
    job = job_from(doc)
    ours = dict(command.train_blocks(job))["wandb"]
    recorded = [t.replace("<run_id>", SEED_NAME) for t in RECORDED_BLOCKS["wandb"]]
    key_at = recorded.index("--wandb-key")
    del recorded[key_at : key_at + 2]
    recorded += ["--wandb-team", "rl"]
    assert ours == recorded
    assert "--wandb-key" not in command.entrypoint(job)


def test_eval_off_drops_block_and_download():
    from lorarl.job.render import downloads

    job = job_from(with_spec(eval={"enabled": False}))
    assert "eval" not in dict(command.train_blocks(job))
    assert "zhuzilin/aime-2024" not in downloads(job)


def test_entrypoint_runs_train_py_under_the_reporter():
    from tests.api.quoting_chain import Chain

    job = job_from(seed_doc())
    with Chain() as chain:  # KubeRay's submitter bash, Ray's joiner, the head's /bin/sh (real)
        argv = ["python3", *chain.run(command.entrypoint(job)).argv]
    split = argv.index("--")
    assert argv[:2] == ["python3", paths.REPORTER_PATH]
    assert argv[split + 1 : split + 3] == ["python3", "/root/miles/train.py"]
    assert argv[split + 3 :] == [t for _, b in command.train_blocks(job) for t in b]


@pytest.mark.parametrize(
    "preset,layers,untied",
    [("qwen3-0.6B", "28", False), ("qwen3-8B", "36", True), ("qwen3-32B", "64", True)],
)
def test_model_presets(preset, layers, untied):
    size = preset.split("-")[1]
    job = job_from(with_spec(model={"name": f"Qwen/Qwen3-{size}"}))
    block = dict(command.train_blocks(job))["model"]
    assert block[block.index("--num-layers") + 1] == layers
    assert ("--untie-embeddings-and-output-weights" in block) == untied


def test_explicit_architecture():
    arch = {"numLayers": 4, "hiddenSize": 256, "ffnHiddenSize": 512, "numAttentionHeads": 4, "numQueryGroups": 2, "qkLayernorm": False}
    job = job_from(with_spec(model={"name": "acme/tiny-llm", "architecture": arch}))
    block = dict(command.train_blocks(job))["model"]
    assert block[block.index("--num-layers") + 1] == "4"
    assert "--qk-layernorm" not in block
    assert block[block.index("--norm-epsilon") + 1] == "1e-06"
