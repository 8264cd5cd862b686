"""Rendered children as a person reads them (pure): one kind or child picked out, the shipped
zipapp summarised, the train.py command one flag per line."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import shlex
from typing import Any

from ..api.types import LoraRLJob
from . import command
from .render import to_yaml

OUTPUTS = ("yaml", "json")


def summary(data: bytes) -> str:
    """What stands in for a binary payload: its size and digest (compare with `sha256sum`)."""
    return f"<{len(data)} bytes, sha256:{hashlib.sha256(data).hexdigest()}; lorarl render --full prints it>"


def abbreviated(obj: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``obj`` with every binaryData value replaced by its summary, and one note per value (what
    was left out, by key). The object is then for reading, not for applying."""
    if not obj.get("binaryData"):
        return obj, []
    out = copy.deepcopy(obj)
    notes = []
    for key, value in out["binaryData"].items():
        data = base64.b64decode(value)
        out["binaryData"][key] = summary(data)
        notes.append(f"binaryData.{key}: {len(data)} bytes, sha256:{hashlib.sha256(data).hexdigest()} (not shown: --full)")
    return out, notes


def select(objects: list[dict[str, Any]], only: str | None) -> list[dict[str, Any]]:
    """The children whose kind (any case) or name is ``only``; all of them without it."""
    if not only:
        return objects
    wanted = only.lower()
    return [o for o in objects if o["kind"].lower() == wanted or o["metadata"]["name"] == only]


def show(objects: list[dict[str, Any]], output: str, full: bool) -> str:
    """The children as multi-document YAML (with a comment per abbreviated value) or as one JSON
    List (the form `kubectl get -o json` prints several objects in)."""
    shown: list[tuple[dict[str, Any], list[str]]] = [(o, []) if full else abbreviated(o) for o in objects]
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": [o for o, _ in shown]}, indent=2) + "\n"
    parts = []
    for obj, notes in shown:
        parts.append("".join(f"# {n}\n" for n in notes) + to_yaml([obj]))
    return "---\n".join(parts)


def command_lines(job: LoraRLJob) -> str:
    """The train.py command as the recipe's scripts write it: one flag and its values per line,
    continued with backslashes (a shell reads it back as the exact argv)."""
    argv = command.train_argv(job)
    lines: list[list[str]] = [argv[:2]]
    for word in argv[2:]:
        if word.startswith("--") or len(lines) == 1:
            lines.append([word])
        else:
            lines[-1].append(word)
    text = [" ".join(shlex.quote(w) for w in line) for line in lines]
    return " \\\n   ".join(text) + "\n"
