"""miles' train.py command line, rebuilt from the dump of its real parser.

``train-py-options-miles-31f1ca9.json`` (beside this file) is every argparse action of the parser
miles' ``train.py`` builds for ``--train-backend megatron`` (Megatron-LM fork + miles' extra
args + SGLang's ``--sglang-*``/``--eval-sglang-*`` + the router's ``--router-*``), written out
by importing the real parser (see ../README.md). This module turns each action back into an
``add_argument`` call of the same kind, so the stand-in accepts and refuses exactly what the real
parser does at argparse level: unknown flags, prefixes (``allow_abbrev`` is false), bad choices
(case-sensitive), bad int/float/JSON values and missing values all end in argparse's
``usage: ...`` + ``train.py: error: ...`` on stderr and exit code 2.

Not reproducible from a dump, and so not checked here:
* the 28 options with a custom type function (sglang's ``human_readable_int``,
  ``json_list_type``, Megatron's ``tuple_type``, enum handlers, ...): any string is accepted
  and kept as a string, and their choices are not checked (the dump holds the enum members'
  ``str()``, not what the handler accepts);
* what miles' full ``parse_args()`` checks after argparse (e.g. the model's ``config.json``
  against ``--num-layers``); ``train.py`` checks what lorarl can see of that (inputs.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys

DUMP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train-py-options-miles-31f1ca9.json")

_TYPES = {"int": int, "float": float, "str": str, "bool": bool}
_SUPPRESS = "'==SUPPRESS=='"


def _warn_deprecated(message: str) -> None:
    # sglang's print_deprecated_warning: logger.warning in bold yellow
    print(f"\033[1;33m{message}\033[0m", file=sys.stderr, flush=True)


# sglang's retired-flag actions (python/sglang/srt/server_args_utils: DeprecatedAction,
# DeprecatedStoreTrueAction, DeprecatedStoreConstAction, DeprecatedAliasStoreAction, and its
# LoRAPathAction): they warn and go on, each storing what its shape stores. The dump cannot
# say whether a DeprecatedAction carries an ``error_message`` (then sglang stops with
# parser.error); none of these flags is in anything lorarl renders.
class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _warn_deprecated(f"The command line argument '{option_string}' is deprecated and will be removed in future versions.")


class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, const=True, default=False, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.")
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, const_value=None, **kwargs):
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        _warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.")
        setattr(namespace, self.dest, self.const_value)


class DeprecatedAliasStoreAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        _warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.")
        setattr(namespace, self.dest, values)


class LoRAPathAction(argparse.Action):
    """``name=path`` or ``path`` words, or JSON objects with lora_name and lora_path."""

    def __call__(self, parser, namespace, values, option_string=None):
        paths = []
        for word in values or []:
            word = word.strip()
            if word.startswith("{") and word.endswith("}"):
                obj = json.loads(word)
                if "lora_path" not in obj or "lora_name" not in obj:
                    raise ValueError(f"{word!r} looks like a JSON str, but it does not contain 'lora_name' and 'lora_path' keys.")
                paths.append(obj)
            else:
                paths.append(word)
        setattr(namespace, self.dest, paths)


_CUSTOM_ACTIONS = {
    "DeprecatedAction": DeprecatedAction,
    "DeprecatedStoreTrueAction": DeprecatedStoreTrueAction,
    "DeprecatedStoreConstAction": DeprecatedStoreConstAction,
    "DeprecatedAliasStoreAction": DeprecatedAliasStoreAction,
    "LoRAPathAction": LoRAPathAction,
}
# argparse's own action classes by the class name the dump records
_STD_ACTIONS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_ExtendAction": "extend",
    "BooleanOptionalAction": argparse.BooleanOptionalAction,
}
_TAKES_VALUES = {"store", "append", "extend"}


def _literal(text):
    """A default as the dump wrote it (its repr); reprs that are not literals stay strings."""
    if text == _SUPPRESS:
        return argparse.SUPPRESS
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _type_of(spec):
    name, module = spec.get("type"), spec.get("type_module")
    if name is None:
        return None, False
    if module == "builtins" and name in _TYPES:
        return _TYPES[name], False
    if module == "json" and name == "loads":
        return json.loads, False
    return str, True  # a custom type function: accepted as a string, unchecked


def _kwargs(spec) -> tuple[list, dict]:
    """add_argument's arguments for one dumped action."""
    kind = spec["action"]
    opts = list(spec["opts"])
    kwargs = {"dest": spec["dest"], "default": _literal(spec["default"])}
    if spec.get("required"):
        kwargs["required"] = True
    if kind in _CUSTOM_ACTIONS:
        kwargs["action"] = _CUSTOM_ACTIONS[kind]
    elif kind in _STD_ACTIONS:
        kwargs["action"] = _STD_ACTIONS[kind]
    else:
        raise ValueError(f"{DUMP}: action {kind!r} of {opts} has no counterpart here")
    action = kwargs["action"]
    if action is argparse.BooleanOptionalAction:
        # it makes the --no- spelling itself from each positive one
        positive = [o for o in opts if not (o.startswith("--no-") and "--" + o[5:] in opts)]
        return positive, kwargs
    value_type, custom = _type_of(spec)
    takes_values = action in _TAKES_VALUES or (action in (DeprecatedAliasStoreAction, LoRAPathAction))
    if takes_values:
        if spec.get("nargs") is not None:
            kwargs["nargs"] = spec["nargs"]
        if value_type is not None:
            kwargs["type"] = value_type
        if spec.get("choices") is not None and not custom:
            # the dump writes choices with str(); compare them as the type converts values
            convert = value_type or str
            kwargs["choices"] = [convert(c) for c in spec["choices"]]
        if spec.get("nargs") == "?":
            kwargs["const"] = spec.get("const")
    elif action in ("store_const", "append_const"):
        kwargs["const"] = spec.get("const")
    elif action in ("store_true", "store_false", "count"):
        pass
    return opts, kwargs


def load_dump(path: str = DUMP) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def build_parser(dump: dict | None = None, prog: str = "train.py") -> argparse.ArgumentParser:
    dump = dump or load_dump()
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=bool(dump.get("allow_abbrev", False)))
    for spec in dump["actions"]:
        if spec["action"] == "_HelpAction":
            continue  # ArgumentParser adds -h/--help itself
        opts, kwargs = _kwargs(spec)
        parser.add_argument(*opts, **kwargs)
    return parser


def parse(argv: list) -> argparse.Namespace:
    """argv as miles' parser reads it; exits 2 with argparse's message on what it refuses."""
    return build_parser().parse_args(argv)
