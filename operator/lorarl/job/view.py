"""Rendered children as a person reads them (pure): one kind or child picked out, the train.py
command one flag per line."""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..api.types import LoraRLJob
from . import command
from .render import to_yaml

OUTPUTS = ("yaml", "json")


def select(objects: list[dict[str, Any]], only: str | None) -> list[dict[str, Any]]:
    """The children whose kind (any case) or name is ``only``; all of them without it."""
    if not only:
        return objects
    wanted = only.lower()
    return [o for o in objects if o["kind"].lower() == wanted or o["metadata"]["name"] == only]


def show(objects: list[dict[str, Any]], output: str) -> str:
    """The children as multi-document YAML or as one JSON List (the form `kubectl get -o json`
    prints several objects in)."""
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    return to_yaml(objects)


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
