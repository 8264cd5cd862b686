"""The controller's lenient read of a stored LoraRLJob.

The API server admitted the object under some CRD version, so only what this operator needs to
render is checked: fields this version does not know are dropped (and returned, for a one-time
report), and the CRD's rules are not re-run, so a different CRD version or CEL implementation
never turns an admitted job into InvalidSpec. The fields the CRD declares come from
``known_fields.json``, generated with the CRD (``make generate``; a test fails on drift), so this
read needs neither the CRD generator nor a validation library.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from ..api import types as api
from ..api.problems import InvalidJob, drop_nulls, schema_problems
from ..job.command import command_problems

KNOWN_FIELDS_FILE = "known_fields.json"


@functools.cache
def known_fields() -> dict[str, Any]:
    """The spec's declared fields (the CRD schema's properties/additionalProperties/items tree)."""
    fields: dict[str, Any] = json.loads(resources.files(__package__).joinpath(KNOWN_FIELDS_FILE).read_text())
    return fields


def drop_unknown(schema: dict[str, Any], value: Any, path: str = "") -> tuple[Any, list[str]]:
    """``value`` without the fields ``schema`` does not declare (as the API server prunes them),
    and their paths."""
    if isinstance(value, dict) and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        known = schema["properties"]
        kept: dict[str, Any] = {}
        dropped: list[str] = []
        for name, sub in value.items():
            where = f"{path}.{name}" if path else name
            if name not in known:
                dropped.append(where)
                continue
            kept[name], more = drop_unknown(known[name], sub, where)
            dropped += more
        return kept, dropped
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        out, dropped = {}, []
        for name, sub in value.items():
            out[name], more = drop_unknown(schema["additionalProperties"], sub, f"{path}.{name}")
            dropped += more
        return out, dropped
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        out_list, dropped = [], []
        for i, item in enumerate(value):
            kept_item, more = drop_unknown(schema["items"], item, f"{path}[{i}]")
            out_list.append(kept_item)
            dropped += more
        return out_list, dropped
    return value, []


def parse_stored(obj: dict[str, Any]) -> tuple[api.LoraRLJob, list[str]]:
    """The typed job and the paths of the fields dropped from it. Raises InvalidJob only when the
    spec cannot be rendered."""
    spec, unknown = drop_unknown(known_fields(), drop_nulls(obj.get("spec") or {}), "spec")
    job, problems = schema_problems({**obj, "spec": spec})
    if job is None:
        raise InvalidJob(problems)
    problems = command_problems(job)
    if problems:
        raise InvalidJob(problems)
    return job, unknown
