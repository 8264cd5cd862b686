"""The trainer stand-in's command line is miles' (the dump of its real parser): it accepts every
command lorarl renders and refuses what miles' parser refuses, with argparse's exit code 2 and
message (shared/reference/miles-argparse/README.md, "Facts checked with the real parser")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.standins.standin_lib import MANIFEST_NAMES, TRAIN_PY, miles_options, rendered_argv

options = miles_options()


@pytest.fixture(scope="module")
def parser():
    return options.build_parser()


def refuse(parser, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_the_dump_is_rebuilt_whole(parser):
    dump = options.load_dump()
    spellings = {o for a in dump["actions"] for o in a["opts"]}
    assert len(spellings) == 2208
    assert spellings == set(parser._option_string_actions)
    assert parser.allow_abbrev is False


@pytest.mark.parametrize("name", MANIFEST_NAMES)
def test_every_rendered_command_parses(parser, name):
    argv = rendered_argv(name)
    ns = parser.parse_args(argv)
    assert ns.hf_checkpoint.startswith("/root/models/")
    assert ns.normalization == "RMSNorm" and ns.megatron_to_hf_mode == "bridge"
    assert ns.eval_prompt_data[0] == "aime24" and ns.colocate is True
    # the reporter's resumed attempt appends these (reporter/launcher.py rewrite)
    resumed = parser.parse_args(argv + ["--save", "/x/attempt-002", "--num-rollout", "7", "--lora-adapter-path", "/x/iter_0000049/adapter"])
    assert (resumed.save, resumed.num_rollout, resumed.lora_adapter_path) == ("/x/attempt-002", 7, "/x/iter_0000049/adapter")


def test_seed_values_are_typed_as_miles_types_them(parser):
    ns = parser.parse_args(rendered_argv())
    assert (ns.num_layers, ns.lr, ns.layernorm_epsilon, ns.lora_rank, ns.rm_type) == (36, 2e-05, 1e-6, 64, "deepscaler")
    assert ns.rollout_batch_size * ns.n_samples_per_prompt == ns.global_batch_size == 64


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--deploy-component", "all"], "unrecognized arguments: --deploy-component all"),  # not on miles main at 31f1ca9
        (
            ["--sglang-lora-backend", "tritonx"],
            "argument --sglang-lora-backend: invalid choice: 'tritonx' (choose from 'triton', 'csgmv', 'ascend', 'torch_native')",
        ),
        (["--normalization", "rmsnorm"], "argument --normalization: invalid choice: 'rmsnorm' (choose from 'LayerNorm', 'RMSNorm')"),
        (["--num-layers", "thirty-six"], "argument --num-layers: invalid int value: 'thirty-six'"),
        (["--lr", "fast"], "argument --lr: invalid float value: 'fast'"),
        (["--apply-chat-template-kwargs", "{bad json"], "argument --apply-chat-template-kwargs: invalid loads value: '{bad json'"),
        (["--num-rollout"], "argument --num-rollout: expected one argument"),
        (["--eval-prompt-data"], "argument --eval-prompt-data: expected at least one argument"),
        (["--rollout-batch"], "unrecognized arguments: --rollout-batch"),  # allow_abbrev is false: no prefixes
        (["--colocate=yes"], "argument --colocate: ignored explicit argument 'yes'"),
    ],
)
def test_refuses_what_miles_refuses(parser, capsys, extra, message):
    assert refuse(parser, rendered_argv() + extra, capsys) == f"train.py: error: {message}"


def test_the_one_required_option(parser, capsys):
    argv = rendered_argv()
    i = argv.index("--rollout-batch-size")
    assert refuse(parser, argv[:i] + argv[i + 2 :], capsys) == "train.py: error: the following arguments are required: --rollout-batch-size"


def test_action_kinds(parser):
    base = rendered_argv()
    ns = parser.parse_args(
        base
        + [
            "--offload-train",
            "--no-offload-rollout",
            "--multi-lora-adapter",
            "a",
            "b",
            "--multi-lora-adapter",
            "c",
            "d",
            "--router-decode",
            "x",
            "--rampup-batch-size",
            "1",
            "2",
            "3",
            "--sglang-lora-paths",
            "n=p",
            "q",
            "--sglang-context-length",
            "32k",
            "--apply-chat-template-kwargs",
            '{"enable_thinking": false}',
            "--use-session-server",
        ]
    )
    assert (ns.offload_train, ns.offload_rollout) == (True, False)
    assert ns.multi_lora_adapters == [["a", "b"], ["c", "d"]] and ns.router_decode == [["x"]]
    assert ns.rampup_batch_size == [1, 2, 3] and ns.sglang_lora_paths == ["n=p", "q"]
    assert ns.sglang_context_length == "32k"  # a custom type (sglang's human_readable_int): kept as a string
    assert ns.apply_chat_template_kwargs == {"enable_thinking": False} and ns.use_session_server is True
    assert parser.parse_args(base).offload_train is None


def test_the_script_exits_2_with_usage_on_stderr():
    result = subprocess.run([sys.executable, str(TRAIN_PY), *rendered_argv(), "--normalization", "rmsnorm"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("usage: train.py [-h]")
    assert result.stderr.rstrip().endswith("train.py: error: argument --normalization: invalid choice: 'rmsnorm' (choose from 'LayerNorm', 'RMSNorm')")


def _schema_choices(node: dict) -> list | None:
    """The values a schema property admits when it is an enum (Optional included), else None."""
    if "enum" in node:
        return node["enum"]
    if "const" in node:
        return [node["const"]]
    if "anyOf" in node:
        out = []
        for member in node["anyOf"]:
            if member.get("type") == "null":
                continue
            choices = _schema_choices(member)
            if choices is None:
                return None
            out += choices
        return out
    return None


def test_a_field_whose_flag_has_choices_admits_only_those(parser):
    """A spec field that renders to a flag with choices in miles' parser must be an enum inside them:
    a free string there would be admitted and then refused by the trainer's argparse (found by the
    fuzz: sglang.attentionBackend `0`)."""
    from lorarl.api.types import LoraRLJob

    schema = LoraRLJob.model_json_schema()
    fields = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("flag"), str):
                fields.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    checked = 0
    for field in fields:
        # a field may render to more than one spelling ("--a / --b"): each must agree
        spellings = [f for f in field["flag"].split(" / ") if f in parser._option_string_actions]
        assert spellings, f"{field['flag']}: not an option of miles' parser"
        action = parser._option_string_actions[spellings[0]]
        if not action.choices or not all(isinstance(c, str) for c in action.choices):
            continue
        admitted = _schema_choices(field)
        assert admitted is not None, f"{field['flag']}: the spec admits any string, miles' parser only {list(action.choices)}"
        assert set(admitted) <= set(action.choices), f"{field['flag']}: {set(admitted) - set(action.choices)} not in miles' choices"
        checked += 1
    assert checked >= 6
