"""The entrypoint through the real chain (tests/api/quoting_chain.py): KubeRay's submitter bash,
Ray's joiner (list2cmdline and shlex.join), the head's shell (dash and bash)."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lorarl.api import types as api
from lorarl.job import command, render
from lorarl.reporter.cli import build_parser, split_argv

from tests.api.quoting_chain import Chain, every_variant, runtime_env_json_given_to_ray
from tests.helpers import job_from, seed_doc, with_spec

VARIANTS = every_variant()
VARIANT_IDS = [f"{j}-{s.rsplit('/', 1)[-1]}" for j, s in VARIANTS]


@pytest.fixture(scope="module")
def chain():
    with Chain() as c:
        yield c


# Words that the chain changes somewhere: the oracle can fail, and SHELL_SAFE must refuse them.
UNSAFE = ["a b", "$(id)", "`id`", "${HOME}", "$HOME", "a'b", 'a"b', "a\nb", "a;b", "a|b", "a&&b", "*", "~", "a\\b", ">f", "#c", "a\tb", "{a,b}"]


@pytest.mark.parametrize("word", UNSAFE, ids=[repr(w) for w in UNSAFE])
def test_the_chain_changes_unsafe_words(chain, word):
    """The oracle is independent and can fail: each of these words, handed to KubeRay verbatim,
    reaches the trainer changed (split, expanded, globbed, or the command fails) in at least one
    joiner/shell pairing, which is why the API refuses them."""
    changed = [(j, s) for j, s in VARIANTS if chain.run(f"python3 {word}", joiner=j, head_shell=s).argv != [word]]
    assert changed, f"{word!r} passed every variant unchanged"
    assert not api_accepts_word(word)


def api_accepts_word(word: str) -> bool:
    import re

    return re.fullmatch(api.SHELL_SAFE.strip("^$"), word) is not None


@pytest.mark.parametrize("joiner,shell", VARIANTS, ids=VARIANT_IDS)
def test_every_safe_character_survives(chain, joiner, shell):
    safe = "".join(c for c in string.printable if api_accepts_word(c))
    words = [safe, *safe, "--lr=2e-05", "%2Fmain", "user@host:/a,b+c"]
    assert chain.run("python3 " + " ".join(words), joiner=joiner, head_shell=shell).argv == words


@pytest.mark.parametrize("joiner,shell", VARIANTS, ids=VARIANT_IDS)
def test_the_seed_command_reaches_the_trainer_exactly(chain, joiner, shell):
    job = job_from(seed_doc())
    received = chain.run(command.entrypoint(job), joiner=joiner, head_shell=shell).argv
    assert received == command.entrypoint_argv(job)[1:]
    # the in-job reporter's own parser splits it: its options, then train.py's argv
    options, train = split_argv(received[1:])
    opts = build_parser().parse_args(options)
    assert (opts.namespace, opts.name, opts.total_rollouts) == ("default", "qwen3-4b-lora-amd", 100)
    assert train[:2] == ["python3", "/root/miles/train.py"]
    assert train[train.index("--lr") + 1] == "2e-05" and train[train.index("--input-key") + 1] == "prompt"


def test_extra_args_end_the_trainer_command(chain):
    job = job_from(with_spec(extraArgs=["--max-tokens-per-gpu", "9216", "--use-dynamic-batch-size"]))
    received = chain.run(command.entrypoint(job)).argv
    assert received[-3:] == ["--max-tokens-per-gpu", "9216", "--use-dynamic-batch-size"]


def test_the_runtime_env_reaches_ray_with_pythonpath_expanded_by_the_submitter(chain):
    """Found by running the chain: KubeRay quotes the runtime env JSON with Go's strconv.Quote
    (double quotes) and the submitter's bash expands ``${PYTHONPATH}`` in it: Ray never sees the
    reference, it gets the submitter pod's PYTHONPATH (the same image as the head: KubeRay gives
    the submitter the head's image, common/job.go:217-221). Everything else arrives unchanged."""
    job = job_from(seed_doc())
    rayjob = render.render(job)[-1]
    run = chain.run(rayjob["spec"]["entrypoint"], rayjob["spec"]["runtimeEnvYAML"])
    got = runtime_env_json_given_to_ray(run)["env_vars"]
    import yaml

    meant = yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"])["env_vars"]
    assert {k: v for k, v in got.items() if k != "PYTHONPATH"} == {k: v for k, v in meant.items() if k != "PYTHONPATH"}
    assert meant["PYTHONPATH"] == "/root/miles:/root/Megatron-LM:${PYTHONPATH}"
    assert got["PYTHONPATH"] == "/root/miles:/root/Megatron-LM:/submitter/site-packages"


SAFE_WORD = st.text(alphabet=[c for c in string.printable if api_accepts_word(c)], min_size=1, max_size=30)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(SAFE_WORD, min_size=1, max_size=6), st.sampled_from(VARIANTS))
def test_any_safe_words_survive(chain, words, variant):
    assert chain.run("python3 " + " ".join(words), joiner=variant[0], head_shell=variant[1]).argv == words
