"""Problems with a LoraRLJob document, named by field path (``spec.lora.rank: message``), as the
API server words them; and the typed read that produces them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from . import types as api


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class InvalidJob(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _loc_to_path(loc: tuple[Any, ...], root: str) -> str:
    parts = [root] if root else []
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]" if parts else f"[{item}]"
        else:
            parts.append(str(item))
    return ".".join(parts)


def schema_problems(obj: dict[str, Any]) -> tuple[api.LoraRLJob | None, list[Problem]]:
    """The typed (defaulted) job, or the typed model's problems with it."""
    try:
        return api.LoraRLJob.model_validate(obj), []
    except ValidationError as err:
        problems = [Problem(_loc_to_path(e["loc"], ""), e["msg"]) for e in err.errors(include_url=False)]
        return None, problems


def drop_nulls(value: Any) -> Any:
    """The API server prunes null fields of a structural schema before defaulting."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def wire_form(job: api.LoraRLJob) -> dict[str, Any]:
    """The object as the API server stores it after defaulting (unset optionals absent)."""
    return job.model_dump(by_alias=True, exclude_none=True, mode="json")
