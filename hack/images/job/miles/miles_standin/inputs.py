"""The inputs miles reads before it trains, with miles' own checks and errors.

* ``--hf-checkpoint``: the model's Hugging Face ``config.json``, loaded as
  ``AutoConfig.from_pretrained`` does for a local path (miles/utils/hf_config.py), then compared
  with the model flags by ``hf_validate_args`` (miles/utils/arguments.py:2679-2681, 3656-3702):
  the same pairs, the same AssertionError text.
* ``--prompt-data`` and each ``--eval-prompt-data NAME PATH``: jsonl rows read as
  miles/utils/data.py:28-64 reads them (a missing path is a FileNotFoundError, a suffix other
  than .jsonl/.parquet a ValueError, undecodable lines printed and skipped), each row's
  ``--input-key`` and, when given, ``--label-key`` taken as data.py:133-245 takes them (a missing
  label is a KeyError; a missing prompt is None). Parquet is refused here (no pyarrow).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


def load_hf_config(path: str) -> dict:
    """transformers' answers for a local checkpoint directory (AutoConfig.from_pretrained)."""
    if not os.path.isdir(path):
        raise OSError(f"Incorrect path_or_model_id: '{path}'. Please provide either the path to a local folder or the repo_id of a model on the Hub.")
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise OSError(f"{path} does not appear to have a file named config.json. Checkout 'https://huggingface.co/{path}/tree/None' for available files.")
    with open(config_file, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except ValueError as exc:
            raise OSError(f"It looks like the config file at '{config_file}' is not a valid JSON file.") from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise ValueError(f"Unrecognized model in {path}. Should have a `model_type` key in its config.json.")
    return config


def hf_validate_args(args, hf_config: dict) -> None:
    config = hf_config.get("text_config") or hf_config
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        config = dict(config, rope_theta=rope["rope_theta"])
    equal = lambda x, y: x == y  # noqa: E731
    pairs = [
        ("hidden_size", "hidden_size", equal),
        ("num_attention_heads", "num_attention_heads", equal),
        ("num_hidden_layers", "num_layers", equal),
        ("intermediate_size", "ffn_hidden_size", equal),
        ("moe_intermediate_size", "moe_ffn_hidden_size", equal),
        ("tie_word_embeddings", "untie_embeddings_and_output_weights", lambda x, y: not x == y),
        ("rms_norm_eps", "norm_epsilon" if os.getenv("DEPRECATED_MEGATRON_COMPATIBLE", "0") == "1" else "layernorm_epsilon", equal),
        ("rope_theta", "rotary_base", equal),
    ]
    errors = []
    for hf_name, megatron_name, compare in pairs:
        if hf_name in config and not compare(config[hf_name], getattr(args, megatron_name)):
            errors.append(f"{hf_name} in hf config {config[hf_name]} is not equal to {megatron_name} {getattr(args, megatron_name)}, please check the config.")
    if errors:
        raise AssertionError("hf_validate_args failed: " + "; ".join(errors))


@dataclass
class Sample:
    prompt: object
    label: object


def read_rows(path: str):
    if not os.path.exists(path):
        raise FileNotFoundError(f"Prompt dataset path '{path}' does not exist.")
    if path.endswith(".parquet"):
        raise ImportError("pyarrow is required for parquet support")
    if not path.endswith(".jsonl"):
        raise ValueError(f"Unsupported file format: {path}. Supported formats are .jsonl and .parquet.")
    with open(path, encoding="utf-8") as f:
        for line_num, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                print(f"JSON decode error at line {line_num}: {e}", flush=True)


def read_dataset(path: str, input_key: str, label_key: str | None) -> list:
    return [Sample(row.get(input_key), row[label_key] if label_key is not None else None) for row in read_rows(path)]


def eval_datasets(args) -> list:
    """(name, samples) of each --eval-prompt-data pair (miles takes them as NAME PATH pairs)."""
    words = list(args.eval_prompt_data or [])
    if len(words) % 2:
        raise AssertionError(f"--eval-prompt-data must be NAME PATH pairs, got {words}")
    input_key = args.eval_input_key or args.input_key
    label_key = args.eval_label_key or args.label_key
    return [(words[i], read_dataset(words[i + 1], input_key, label_key)) for i in range(0, len(words), 2)]
