"""Offline validation of a LoraRLJob: the same answer the API server would give, and more.

Three layers, each reporting ``field.path: message``:
1. schema: the pydantic model (types, ranges, patterns, enums, unknown fields);
2. CEL: the ``x-kubernetes-validations`` rules of the generated CRD, evaluated with a CEL
   interpreter on the defaulted object (transition rules need an old object and are skipped);
3. semantics the CRD cannot see (data-parallel shape, flags that belong to the spec, secrets).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterator

import celpy
from pydantic import ValidationError

from . import api, command, crdgen


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
    try:
        return api.LoraRLJob.model_validate(obj), []
    except ValidationError as err:
        problems = [Problem(_loc_to_path(e["loc"], ""), e["msg"]) for e in err.errors(include_url=False)]
        return None, problems


# ------------------------------------------------------------------------------------------ CEL


@functools.cache
def _cel_env() -> celpy.Environment:
    return celpy.Environment()


@functools.cache
def _program(rule: str):
    env = _cel_env()
    return env.program(env.compile(rule))


def _rules_with_values(schema: dict[str, Any], value: Any, path: str) -> Iterator[tuple[str, dict, Any]]:
    """Yield (path, rule, self-value) for every rule whose object is present in ``value``."""
    for rule in schema.get("x-kubernetes-validations", []):
        yield path, rule, value
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                yield from _rules_with_values(sub, value[name], f"{path}.{name}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _rules_with_values(schema["items"], item, f"{path}[{i}]")


def wire_form(job: api.LoraRLJob) -> dict[str, Any]:
    """The object as the API server stores it after defaulting (unset optionals absent)."""
    return job.model_dump(by_alias=True, exclude_none=True, mode="json")


@functools.cache
def _crd_schema() -> dict[str, Any]:
    """The generated CRD's schema, built once per process (read-only here)."""
    return crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def cel_problems(job: api.LoraRLJob) -> list[Problem]:
    root = _crd_schema()
    obj = wire_form(job)
    problems: list[Problem] = []
    for path, rule, value in _rules_with_values(root, obj, ""):
        if "oldSelf" in rule["rule"]:
            continue  # transition rules compare with the stored object: checked by the API server
        result = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if isinstance(result, Exception) or not bool(result):
            field = (path + rule.get("fieldPath", "")).lstrip(".") or "metadata.name"
            problems.append(Problem(field, rule["message"]))
    return problems


# ------------------------------------------------------------------------------------ semantics

# Flags the spec owns: passing them in extraArgs would silently fight the spec's value.
_PARALLEL_FLAGS = {
    "--tensor-model-parallel-size": 1,
    "--pipeline-model-parallel-size": 1,
    "--context-parallel-size": 1,
}
_SECRET_FLAGS = {"--wandb-key", "--hf-token"}


def _flag_value(args: list[str], name: str) -> str | None:
    for i, word in enumerate(args):
        if word == name and i + 1 < len(args):
            return args[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _owned_flags(job: api.LoraRLJob) -> set[str]:
    spec_only = job.model_copy(update={"spec": job.spec.model_copy(update={"extra_args": None})})
    return {w for _, block in command.train_blocks(spec_only) for w in block if w.startswith("--")}


def semantic_problems(job: api.LoraRLJob) -> list[Problem]:
    problems: list[Problem] = []
    extra = list(job.spec.extra_args or [])
    owned = _owned_flags(job)
    for i, word in enumerate(extra):
        flag_name = word.split("=", 1)[0]
        if flag_name in _SECRET_FLAGS:
            problems.append(
                Problem(f"spec.extraArgs[{i}]", f"{flag_name} would put a secret on the command line; use spec.tracking.wandb.apiKeySecretRef / spec.dataPrep.hfTokenSecretRef")
            )
        elif flag_name in owned:
            problems.append(Problem(f"spec.extraArgs[{i}]", f"{flag_name} is set from the spec; change the spec field instead of overriding it"))

    sizes = {}
    for name, default in _PARALLEL_FLAGS.items():
        raw = _flag_value(extra, name)
        try:
            sizes[name] = int(raw) if raw is not None else default
        except ValueError:
            problems.append(Problem("spec.extraArgs", f"{name} needs an integer, got {raw!r}"))
            sizes[name] = default
    gpus = job.spec.hardware.nodes * command.gpus_per_node(job)
    model_parallel = 1
    for size in sizes.values():
        model_parallel *= max(size, 1)
    if gpus % model_parallel:
        problems.append(Problem("spec.hardware", f"{gpus} GPUs cannot be split into model-parallel groups of {model_parallel}"))
    else:
        data_parallel = gpus // model_parallel
        gbs = job.spec.rollout.global_batch_size
        if gbs % data_parallel:
            problems.append(
                Problem(
                    "spec.rollout.globalBatchSize",
                    f"{gbs} is not divisible by the data-parallel size {data_parallel} "
                    f"({gpus} GPUs / model parallel {model_parallel}); Megatron would refuse it at start-up",
                )
            )
    try:
        command.entrypoint(job)
    except (command.UnsafeTokenError, ValueError) as err:
        problems.append(Problem("spec", str(err)))
    return problems


def validate(obj: dict[str, Any]) -> tuple[api.LoraRLJob | None, list[Problem]]:
    """All problems of one LoraRLJob document; the parsed job when it has none."""
    if not isinstance(obj, dict):
        return None, [Problem("", "expected a YAML mapping (a LoraRLJob object)")]
    if obj.get("kind") != api.KIND or obj.get("apiVersion") != api.API_VERSION:
        return None, [Problem("kind", f"expected apiVersion {api.API_VERSION} and kind {api.KIND}, got {obj.get('apiVersion')!r} {obj.get('kind')!r}")]
    job, problems = schema_problems(obj)
    if job is None:
        return None, problems
    # semantic checks assume the cross-field rules hold (e.g. a resolvable architecture)
    problems = cel_problems(job) or semantic_problems(job)
    return (job if not problems else None), problems


def parse_job(obj: dict[str, Any]) -> api.LoraRLJob:
    """The validated job, or InvalidJob listing every problem."""
    job, problems = validate(obj)
    if problems or job is None:
        raise InvalidJob(problems)
    return job

