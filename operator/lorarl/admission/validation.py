"""Validation of a LoraRLJob: the API server's answer offline (strict).

``validate`` (``lorarl validate``, ``lorarl render``) gives the answer the API server gives, in
three layers, each reporting ``field.path: message``:
1. structure: the generated CRD's structural schema, checked as the API server checks it (strict
   types, no coercion, unknown fields refused as with kubectl's strict field validation, list-map
   keys unique, int64 range, RE2 pattern semantics); nulls are dropped first, as the server
   prunes them before defaulting;
2. CEL: the CRD's ``x-kubernetes-validations`` rules on the defaulted object, through cel-python
   plus the Kubernetes CEL library functions the rules use (``indexOf``) and RE2 ``matches``;
3. a last defence in depth: every word of the rendered command is shell-inert.

The controller never imports this module (nor celpy or jsonschema): its lenient read of an
admitted object is ``lorarl.control.stored``.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sized
from typing import Any

import celpy
import jsonschema

from ..api import types as api
from ..api.problems import InvalidJob, Problem, drop_nulls, schema_problems, wire_form
from ..job.command import command_problems
from . import crdgen

INT64 = (-(2**63), 2**63 - 1)


# ------------------------------------------------------------------------------------ structure


def go_regex(pattern: str) -> re.Pattern[str]:
    """A CRD pattern (Go RE2) as a Python regex with RE2's meaning of ``$``: the end of the text
    (Python's ``$`` also matches before a final newline); and of ``\\d``, ``\\w``, ``\\s``, ``\\b``:
    ASCII only, as RE2's (Python's match any Unicode digit, letter, space)."""
    return _go_regex(pattern)


@functools.cache
def _go_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern), re.ASCII)


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema as the API server applies it to a create/update with strict field
    validation: known properties only (where the schema does not preserve unknown fields)."""
    out = dict(schema)
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if "properties" in out:
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    out.pop("x-kubernetes-validations", None)  # CEL: layer 2
    out.pop("default", None)
    if out.get("type") == "integer":
        out.setdefault("minimum", INT64[0])
        out.setdefault("maximum", INT64[1])
    return out


def _pattern(validator, pattern, instance, schema):
    if isinstance(instance, str) and not go_regex(pattern).search(instance):
        yield jsonschema.ValidationError(f"should match pattern {pattern!r}")


def _list_type(validator, list_type, instance, schema):
    if not isinstance(instance, list):
        return
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen: set[tuple] = set()
        for i, item in enumerate(instance):
            key = tuple(repr(item.get(k)) if isinstance(item, dict) else None for k in keys)
            if key in seen:
                yield jsonschema.ValidationError(f"Duplicate value: {dict(zip(keys, (item.get(k) for k in keys), strict=False))}", path=[i])
            seen.add(key)
    elif list_type == "set":
        seen_items: list[Any] = []
        for i, item in enumerate(instance):
            if item in seen_items:
                yield jsonschema.ValidationError(f"Duplicate value: {item!r}", path=[i])
            seen_items.append(item)


def _not_bool_number(checker, instance):  # JSON numbers; a bool is not one
    return isinstance(instance, (int, float)) and not isinstance(instance, bool)


_TYPES = jsonschema.Draft4Validator.TYPE_CHECKER.redefine("number", _not_bool_number)
_Validator = jsonschema.validators.extend(
    jsonschema.Draft4Validator,
    validators={"pattern": _pattern, "x-kubernetes-list-type": _list_type},
    type_checker=_TYPES,
)


@functools.cache
def _structure_validator() -> jsonschema.protocols.Validator:
    root = copy.deepcopy(_crd_schema())
    root["properties"]["metadata"] = object_meta_schema()
    root["properties"].pop("status")  # the status subresource ignores status on create/update
    root["properties"]["status"] = {}
    return _Validator(_strict(root))


_META_TYPES = {
    "str": {"type": "string"},
    "datetime": {"type": "string"},
    "int": {"type": "integer"},
    "Dict[str, str]": {"type": "object", "additionalProperties": {"type": "string"}},
    "dict(str, str)": {"type": "object", "additionalProperties": {"type": "string"}},  # the client's spelling before 31.0
    "List[str]": {"type": "array", "items": {"type": "string"}},
    "list[str]": {"type": "array", "items": {"type": "string"}},
}


def object_meta_schema() -> dict[str, Any]:
    """metadata as the API server decodes it (strictly: an unknown field such as metadata.foo is
    refused, "strict decoding error: unknown field"): the fields and types of core ObjectMeta, as
    the kubernetes client's V1ObjectMeta lists them (generated from the Kubernetes OpenAPI)."""
    from kubernetes.client.models.v1_object_meta import V1ObjectMeta

    properties = {
        wire: _META_TYPES.get(V1ObjectMeta.openapi_types[attr], {"type": "array", "items": {"type": "object"}})
        for attr, wire in V1ObjectMeta.attribute_map.items()
    }
    return {"type": "object", "properties": properties}


def _json_path(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def structure_problems(obj: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for err in _structure_validator().iter_errors(obj):
        at = _json_path(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = err.schema.get("properties", {}) if isinstance(err.schema, Mapping) else {}
            for name in sorted(set(err.instance) - set(known)):
                problems.append(Problem(f"{at}.{name}" if at else name, "unknown field"))
            continue
        if err.validator == "required":
            name = err.message.split("'")[1] if "'" in err.message else ""
            problems.append(Problem(f"{at}.{name}" if at else name, "Required value"))
            continue
        problems.append(Problem(at or "(root)", _message(err)))
    return sorted(set(problems), key=lambda p: (p.field, p.message))


def _message(err: jsonschema.ValidationError) -> str:
    v, s = err.validator, err.validator_value
    # what the validator checked: a list, an object or a string for the size rules, the object schema
    # (not a boolean one) for the bounds
    size = len(err.instance) if isinstance(err.instance, Sized) else 0
    schema = err.schema if isinstance(err.schema, Mapping) else {}
    if v == "type":
        return f"must be of type {s}"
    if v == "enum" and isinstance(s, list):
        return "Unsupported value: " + repr(err.instance) + "; supported values: " + ", ".join(map(str, s))
    if v == "maxLength":
        return f"Too long: may not be more than {s} bytes"
    if v in ("maxItems", "maxProperties"):
        return f"Too many: {size}: must have at most {s} items"
    if v == "minLength":
        return f"Too short: may not be less than {s} bytes"
    if v in ("minItems", "minProperties"):
        return f"Too few: {size}: must have at least {s} items"
    if v == "minimum":
        return f"should be greater than {'' if schema.get('exclusiveMinimum') else 'or equal to '}{s}"
    if v == "maximum":
        return f"should be less than {'' if schema.get('exclusiveMaximum') else 'or equal to '}{s}"
    return err.message


# ------------------------------------------------------------------------------------------ CEL


@functools.cache
def _cel_env() -> celpy.Environment:
    return celpy.Environment()


def _cel_matches(text: Any, pattern: Any) -> celpy.celtypes.BoolType:
    """CEL ``matches`` with RE2 semantics (unanchored search; ``$`` is the end of the text)."""
    return celpy.celtypes.BoolType(go_regex(str(pattern)).search(str(text)) is not None)


def _cel_index_of(items: Any, wanted: Any) -> celpy.celtypes.IntType:
    """``<list>.indexOf(x)`` of the Kubernetes CEL list library (k8s.io/apiserver pkg/cel/library/lists.go)."""
    for i, item in enumerate(items):
        if item == wanted:
            return celpy.celtypes.IntType(i)
    return celpy.celtypes.IntType(-1)


# ------------------------------------------------------------------ Kubernetes resource quantities
# The grammar of k8s.io/apimachinery/pkg/api/resource/quantity.go (v0.37.2): parseQuantityString
# (lines 161-276: optional sign, digits, optional "." and digits, then a suffix made of
# "eEinumkKMGTP" optionally followed by a signed integer) and ParseQuantity (278-): the suffix
# must be a decimal SI one (n u m "" k M G T P E), a binary SI one (Ki .. Ei, suffix.go:113-132)
# or e/E and an integer exponent (suffix.go:189-195). Only the sign of the value matters here:
# a non-zero value is never rounded to zero (ParseQuantity rounds up to 1n).
_QUANTITY_SUFFIXES = {"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
_QUANTITY_SHAPE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*(?:[-+]?[0-9]*))")


class Quantity:
    """A parsed quantity: its sign, which is all the CRD's rules compare (with zero)."""

    def __init__(self, sign: int):
        self.sign = sign


def parse_quantity(text: str) -> Quantity | None:
    """resource.ParseQuantity's verdict on ``text``: a Quantity, or None where it returns an error."""
    if not text:
        return None
    match = _QUANTITY_SHAPE.fullmatch(text)
    if match is None:
        return None
    sign, num, denom, suffix = match.groups()
    if suffix and suffix[-1] in "+-":  # a sign with no exponent digits after it
        return None
    if suffix not in _QUANTITY_SUFFIXES:
        if len(suffix) < 2 or suffix[0] not in "eE" or not re.fullmatch(r"[-+]?[0-9]+", suffix[1:]):
            return None
        if not -(2**63) <= int(suffix[1:]) < 2**63:  # strconv.ParseInt(.., 64)
            return None
    nonzero = any(c != "0" for c in (num or "") + (denom or ""))
    return Quantity(0 if not nonzero else (-1 if sign == "-" else 1))


def _cel_is_quantity(text: Any) -> celpy.celtypes.BoolType:
    """``isQuantity(<string>)`` of the Kubernetes CEL quantity library."""
    return celpy.celtypes.BoolType(isinstance(text, str) and parse_quantity(str(text)) is not None)


def _cel_quantity(text: Any) -> Quantity:
    """``quantity(<string>)``: an error (the rule fails) when the string is not a quantity."""
    parsed = parse_quantity(str(text))
    if parsed is None:
        raise ValueError(f"not a quantity: {text!r}")
    return parsed


def _cel_is_greater_than(value: Quantity, other: Quantity) -> celpy.celtypes.BoolType:
    """``<Quantity>.isGreaterThan(<Quantity>)``, for a comparison with zero (what the rules do)."""
    if other.sign != 0:
        raise ValueError("lorarl validate compares quantities with zero only")
    return celpy.celtypes.BoolType(value.sign > 0)


def _cel_split(text: Any, separator: Any) -> celpy.celtypes.ListType:
    """``<string>.split(<string>)`` of cel-go's strings extension (in the CRD environment since
    Kubernetes 1.27: k8s.io/apiserver pkg/cel/environment/base.go, ext.Strings)."""
    return celpy.celtypes.ListType([celpy.celtypes.StringType(part) for part in str(text).split(str(separator))])


CEL_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "split": _cel_split,
    "matches": _cel_matches,
    "indexOf": _cel_index_of,
    "isQuantity": _cel_is_quantity,
    "quantity": _cel_quantity,
    "isGreaterThan": _cel_is_greater_than,
}


@functools.cache
def _program(rule: str):
    env = _cel_env()
    return env.program(env.compile(rule), functions=CEL_FUNCTIONS)


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
            problems.append(Problem(field, _rule_message(rule, value)))
    return problems


def _rule_message(rule: dict[str, Any], value: Any) -> str:
    """A failed rule's message: its messageExpression when that evaluates to a string (the API
    server falls back to ``message`` otherwise)."""
    if "messageExpression" in rule:
        text = _program(rule["messageExpression"]).evaluate({"self": celpy.json_to_cel(value)})
        if isinstance(text, str) and not isinstance(text, Exception):
            return str(text)
    return rule["message"]


def name_problems(metadata: dict[str, Any]) -> list[Problem]:
    """The CRD's rules on metadata.name, with the API server's messages (checked before the typed
    model, whose own name check would word them differently)."""
    problems: list[Problem] = []
    if not isinstance(metadata.get("name", ""), str):
        return problems  # the typed model names the wrong type
    for rule in _crd_schema().get("x-kubernetes-validations", []):
        if "self.metadata" not in rule["rule"] or "self.spec" in rule["rule"]:
            continue
        result = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel({"metadata": {"name": metadata.get("name", "")}})})
        if isinstance(result, Exception) or not bool(result):
            problems.append(Problem("metadata.name", rule["message"]))
    return problems


def validate(obj: Any) -> tuple[api.LoraRLJob | None, list[Problem]]:
    """All problems of one LoraRLJob document, as the API server would report them; the parsed
    (defaulted) job when it has none. Never raises on any YAML/JSON value."""
    if not isinstance(obj, dict):
        return None, [Problem("(root)", "expected a YAML mapping (a LoraRLJob object)")]
    if obj.get("kind") != api.KIND or obj.get("apiVersion") != api.API_VERSION:
        return None, [Problem("kind", f"expected apiVersion {api.API_VERSION} and kind {api.KIND}, got {obj.get('apiVersion')!r} {obj.get('kind')!r}")]
    if not isinstance(obj.get("metadata"), dict):
        return None, [Problem("metadata", "must be of type object")]
    obj = drop_nulls(obj)
    obj["metadata"].setdefault("name", "")
    problems = structure_problems(obj) or name_problems(obj["metadata"])
    if problems:
        return None, problems
    job, problems = schema_problems(obj)
    if job is None:
        return None, problems
    # the renderer's check assumes the cross-field rules hold (e.g. a resolvable architecture)
    problems = cel_problems(job) or command_problems(job)
    return (job if not problems else None), problems


def parse_job(obj: dict[str, Any]) -> api.LoraRLJob:
    """The validated job, or InvalidJob listing every problem (strict: ``lorarl validate``)."""
    job, problems = validate(obj)
    if problems or job is None:
        raise InvalidJob(problems)
    return job
