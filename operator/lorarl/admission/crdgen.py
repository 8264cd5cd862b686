"""Generate the LoraRLJob CRD from the pydantic models (the one source of truth).

pydantic's JSON Schema is turned into a Kubernetes structural schema: ``$ref``s inlined,
``Optional`` unwrapped, titles dropped, object defaults added so nested defaults apply, our
``flag`` documentation metadata removed, and ``x-kubernetes-*`` extensions kept.
"""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel

from ..api import types as api

CRD_NAME = f"{api.PLURAL}.{api.GROUP}"
CRD_FILE = f"{api.GROUP}_{api.PLURAL}.yaml"
_DOC_ONLY_KEYS = {"title", "flag"}


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline $refs, unwrap Optional, and merge our extension keys. Returns a new dict."""
    schema = dict(schema)
    if "x-lorarl-core-schema" in schema:
        return _embedded_core_schema(schema)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
        # pydantic < 2.9 wraps a $ref that has sibling keys (description, default) in allOf
        schema["$ref"] = schema.pop("allOf")[0]["$ref"]
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema.pop("$ref").rsplit("/", 1)[-1]])
        # field-level description/default/extensions win over the referenced model's
        target.update(schema)
        schema = target
    any_of = schema.pop("anyOf", None)
    if any_of is not None:
        non_null = [s for s in any_of if s.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"unsupported union in schema: {any_of}")
        inner = dict(non_null[0])
        if "$ref" in inner:
            inner = _resolve(inner, defs)
        for k, v in schema.items():
            if k == "default" and v is None:
                continue
            if k == "items" and "items" in inner:
                inner["items"] = {**inner["items"], **v}
                continue
            inner[k] = v
        schema = inner
    if schema.get("default", "x") is None:
        del schema["default"]
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DOC_ONLY_KEYS:
            continue
        if key == "properties":
            out[key] = {name: _resolve(sub, defs) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = _resolve(value, defs)
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _resolve(value, defs)
        else:
            out[key] = value
    return _structural(out)


def _structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Fix what pydantic emits but a structural schema does not accept."""
    if isinstance(schema.get("description"), str):
        schema["description"] = " ".join(schema["description"].split())
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(schema.get(exclusive), (int, float)) and not isinstance(schema[exclusive], bool):
            # JSON Schema 2020 (pydantic) -> OpenAPI v3.0 (Kubernetes): a bound plus a boolean
            schema[bound] = schema.pop(exclusive)
            schema[exclusive] = True
    # map keys have no schema in a structural schema: their syntax is a CEL rule on the map
    schema.pop("propertyNames", None)
    if schema.get("type") == "number":
        # a number's bounds as numbers: pydantic writes gt=0 as 0 or 0.0 depending on its version
        for bound in ("minimum", "maximum"):
            if isinstance(schema.get(bound), int) and not isinstance(schema[bound], bool):
                schema[bound] = float(schema[bound])
    if "const" in schema:  # Literal with one value
        schema["enum"] = [schema.pop("const")]
    if "enum" in schema and "type" not in schema:
        schema["type"] = "string"
    if schema.get("type") == "object" and "properties" not in schema:
        extra = schema.get("additionalProperties")
        if extra is True or extra == {} or extra is None:
            # free-form object (e.g. a core/v1 Affinity): keep it, do not prune it
            schema.pop("additionalProperties", None)
            schema["x-kubernetes-preserve-unknown-fields"] = True
    if schema.get("type") == "object" and "properties" in schema:
        schema.pop("additionalProperties", None)
    return schema


# Bounds added to an embedded core/v1 schema (it has none): they keep every object the API server
# admits small enough for etcd, for the children that copy it, and for CEL cost estimates.
CORE_MAX_STRING = 317  # the longest core name syntax: a qualified name (253 + "/" + 63)
CORE_MAX_ITEMS = 32
CORE_MAX_PROPERTIES = 32


@functools.cache
def _vendored(name: str) -> dict[str, Any]:
    text = resources.files("lorarl.admission").joinpath("schemas", f"{name}.json").read_text()
    return json.loads(text)["schema"]


# Tighter bounds for an Affinity by field name (issue 35, point 3): the renderer copies it into
# three pod templates of the RayJob (head, workers, KubeRay's submitter) and KubeRay into the
# RayCluster, and the per-list bounds multiply (terms x requirements x values); with these, the
# largest affinity admitted is about 0.12 MB of JSON and the largest RayJob a spec renders stays
# under 1 MiB, below etcd's default 1.5 MiB request limit with margin
# (tests/render/test_render_size.py renders the largest spec the CRD admits). A value or a
# namespace is a label value or a namespace name (at most 63 characters; a longer one matches no
# node label), matchFields' only key is metadata.name.
AFFINITY_MAX_ITEMS = {
    "nodeSelectorTerms": 4,
    "preferredDuringSchedulingIgnoredDuringExecution": 2,  # weighted node terms; pod (anti)affinity terms
    "requiredDuringSchedulingIgnoredDuringExecution": 2,  # pod (anti)affinity terms
    "matchExpressions": 4,
    "matchFields": 1,
    "values": 8,
    "namespaces": 8,
    "matchLabelKeys": 2,
    "mismatchLabelKeys": 2,
}
AFFINITY_MAX_PROPERTIES = 4  # matchLabels
AFFINITY_SHORT_STRINGS = {"values": 63, "namespaces": 63}


def _bounded(schema: dict[str, Any], caps: bool = False, name: str = "") -> dict[str, Any]:
    out = dict(schema)
    kind = out.get("type")
    if kind == "string" and "enum" not in out:
        out.setdefault("maxLength", CORE_MAX_STRING)
    if kind == "array":
        out.setdefault("maxItems", AFFINITY_MAX_ITEMS.get(name, CORE_MAX_ITEMS) if caps else CORE_MAX_ITEMS)
        if caps and name in AFFINITY_SHORT_STRINGS and isinstance(out.get("items"), dict):
            out["items"] = {**out["items"], "maxLength": AFFINITY_SHORT_STRINGS[name]}
    if kind == "object" and isinstance(out.get("additionalProperties"), dict):
        out.setdefault("maxProperties", AFFINITY_MAX_PROPERTIES if caps else CORE_MAX_PROPERTIES)
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _bounded(out[key], caps)
    if "properties" in out:
        out["properties"] = {k: _bounded(v, caps, k) for k, v in out["properties"].items()}
    return out


def _embedded_core_schema(field: dict[str, Any]) -> dict[str, Any]:
    """A field typed as a free-form dict in the model but checked by the API server against the
    real core/v1 schema (vendored by hack/schemas/vendor_core_v1.py from KubeRay's CRD), plus
    the rules pod validation applies to it, so a bad one is refused at admission instead of when
    KubeRay creates the pods."""
    out = _bounded(copy.deepcopy(_vendored(field["x-lorarl-core-schema"])), caps=field["x-lorarl-core-schema"] == "core_v1_affinity")
    _pod_validation_rules(out, node=False)
    out["description"] = " ".join(field.get("description", "").split())
    return out


# What k8s.io/kubernetes pkg/apis/core/validation checks in an Affinity (validateNodeSelectorRequirement,
# validateNodeFieldSelectorRequirement, validatePodAffinityTerm, validateWeightedPodAffinityTerms)
# and apimachinery's ValidateLabelSelectorRequirement / ValidateLabels.
_NODE_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
_LABEL_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist"]
_VALUES_RULE = api.cel(
    "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : "
    "(self.operator in ['Gt', 'Lt'] ? (has(self.values) && size(self.values) == 1) : (!has(self.values) || size(self.values) == 0))",
    "values must be non-empty for In and NotIn, hold exactly one integer for Gt and Lt, and be empty for Exists and DoesNotExist",
    field_path=".values",
)
_LABEL_KEYS_RULE = api.cel(
    f"self.all(k, k.size() <= {api.MAX_QUALIFIED_NAME} && k.matches('{api.QUALIFIED_NAME.replace(chr(92), chr(92) * 2)}'))",
    "matchLabels keys must be qualified names (an optional DNS subdomain prefix and '/', then a name of at most 63 characters)",
)


def _pod_validation_rules(schema: dict[str, Any], node: bool, name: str = "") -> None:
    props = schema.get("properties", {})
    if {"key", "operator"} <= set(props) and schema.get("type") == "object":
        props["operator"]["enum"] = list(_NODE_OPERATORS if node else _LABEL_OPERATORS)
        if name == "matchFields":
            props["key"]["enum"] = ["metadata.name"]  # the only node field a selector may use
        else:
            props["key"].update(pattern=api.QUALIFIED_NAME, maxLength=api.MAX_QUALIFIED_NAME)
        schema.setdefault("x-kubernetes-validations", []).append(dict(_VALUES_RULE))
    if "nodeSelectorTerms" in props:
        # validateNodeSelector: "must have at least one node selector term" (an empty list makes
        # every Ray pod invalid: KubeRay's pod creation gets a 422 and the job waits forever)
        props["nodeSelectorTerms"]["minItems"] = 1
    if "weight" in props:
        props["weight"].update(minimum=1, maximum=100)
    if "topologyKey" in props:
        props["topologyKey"].update(pattern=api.QUALIFIED_NAME, maxLength=api.MAX_QUALIFIED_NAME)
    if "matchLabels" in props:
        labels = props["matchLabels"]
        labels["additionalProperties"].update(pattern=api.LABEL_VALUE, maxLength=63)
        labels["x-kubernetes-validations"] = [dict(_LABEL_KEYS_RULE)]
    for child, sub in props.items():
        _pod_validation_rules(sub, node or child == "nodeAffinity", child)
    if isinstance(schema.get("items"), dict):
        _pod_validation_rules(schema["items"], node, name)


def owned_flags() -> dict[str, str]:
    """Every train.py flag the renderer derives from the spec, with what sets it: extraArgs must
    not override them (a duplicate flag would silently fight the spec's value).

    The flags are those command.py emits, over jobs that switch each optional block on (W&B, an
    explicit architecture, eval, NVIDIA and AMD profiles). Each is named by the spec field whose
    ``flag`` metadata is that flag (e.g. ``--lora-rank`` -> ``spec.lora.rank``), else by the
    command block that emits it (``--swiglu`` -> ``spec.model``; the misc block's flags are the
    recipe's own: ``the recipe``)."""
    from ..job import command

    base = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "x"}}
    shapes = [
        {
            "model": {"name": "Qwen/Qwen3-4B"},
            "hardware": {"accelerator": "MI355X"},
            "tracking": {"wandb": {"apiKeySecretRef": {"name": "w", "key": "k"}, "team": "t", "group": "g", "host": "http://w"}},
            "sglang": {"loraBackend": "triton", "attentionBackend": "triton"},
        },
        {
            "model": {
                "name": "acme/m",
                "architecture": {
                    "numLayers": 1,
                    "hiddenSize": 8,
                    "ffnHiddenSize": 8,
                    "numAttentionHeads": 1,
                    "numQueryGroups": 1,
                    "untieEmbeddingsAndOutputWeights": True,
                    "qkLayernorm": False,
                },
            },
            "hardware": {"accelerator": "H100"},
            "eval": {"enabled": False},
            "checkpoint": {"resume": False},
            "rollout": {"applyChatTemplate": False, "shuffle": False, "balanceData": False},
            "lora": {"baseCpuBackup": False},
        },
    ]
    by_field = _flag_fields(api.LoraRLJobSpec, "spec")
    owned: dict[str, str] = {}
    for spec in shapes:
        job = api.LoraRLJob.model_validate({**base, "spec": spec})
        for block, args in command.train_blocks(job):
            section = _BLOCK_SECTIONS.get(block)
            for word in args:
                if word.startswith("--") and word not in owned:
                    owned[word] = by_field.get(word) or (f"spec.{section}" if section else "the recipe")
    for name, field in by_field.items():
        owned.setdefault(name, field)
    return dict(sorted(owned.items()))


# command.py's blocks and the spec section each one renders (misc: the recipe's fixed flags and
# the GPU counts, which follow spec.hardware but are not meant to be given twice)
_BLOCK_SECTIONS = {
    "model": "model",
    "checkpoint": "checkpoint",
    "lora": "lora",
    "rollout": "rollout",
    "eval": "eval",
    "optimizer": "optimizer",
    "grpo": "algorithm",
    "wandb": "tracking.wandb",
    "sglang": "sglang",
}


def _flag_fields(model: type[BaseModel], prefix: str) -> dict[str, str]:
    """flag -> the field path whose ``flag`` metadata names it, over the spec's models."""
    found: dict[str, str] = {}
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}"
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        for flag_name in str(extra.get("flag", "")).split("/"):
            if flag_name.strip().startswith("--"):
                found.setdefault(flag_name.strip(), path)
        sub = model_in(field.annotation)
        if sub is not None:
            for flag_name, sub_path in _flag_fields(sub, path).items():
                found.setdefault(flag_name, sub_path)
    return found


def owned_flags_rule() -> dict[str, Any]:
    """One rule on each extraArgs item; its messageExpression names the flag and what sets it."""
    owned = owned_flags()
    names = "|".join(f.replace(".", "[.]") for f in owned)
    table = ", ".join(f"'{flag}': '{field}'" for flag, field in owned.items())
    rule = api.cel(
        f"!self.matches('^({names})(=.*)?$')",
        "a flag the spec sets (e.g. --lora-rank, set by spec.lora.rank) must be changed in the spec, not overridden in extraArgs",
    )
    rule["messageExpression"] = f"self.split('=')[0] + ' is set by ' + {{{table}}}[self.split('=')[0]] + ': change that instead of overriding it in extraArgs'"
    return rule


def spec_schema() -> dict[str, Any]:
    raw = api.LoraRLJobSpec.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema = _resolve(raw, defs)
    _default_nested_objects(schema, api.LoraRLJobSpec)
    schema["properties"]["extraArgs"]["items"]["x-kubernetes-validations"].insert(1, owned_flags_rule())
    return schema


def _default_nested_objects(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """pydantic omits defaults made by default_factory; give those fields their factory value,
    fully spelled out (the API server validates a default against the CEL rules as it stands,
    before nested defaulting, and `kubectl explain` shows it)."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        prop = schema.get("properties", {}).get(alias)
        if prop is None:
            continue
        if field.default_factory is not None:
            value = field.get_default(call_default_factory=True)
            if hasattr(value, "model_dump"):
                dumped = value.model_dump(by_alias=True, exclude_none=True, mode="json")
                prop["default"] = dumped
            elif isinstance(value, list):
                prop["default"] = [v.model_dump(by_alias=True, exclude_none=True, mode="json") if hasattr(v, "model_dump") else v for v in value]
            elif isinstance(value, dict):
                prop["default"] = value
        annotation = field.annotation
        sub_model = model_in(annotation)
        if sub_model is not None and prop.get("type") == "object":
            _default_nested_objects(prop, sub_model)


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (Optional[X], list[X], X), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = model_in(arg)
        if found is not None:
            return found
    return None


def status_schema() -> dict[str, Any]:
    raw = api.LoraRLJobStatus.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema = _resolve(raw, defs)
    schema.pop("additionalProperties", None)
    _drop_defaults(schema)  # status defaults would be written by the API server: keep it honest
    # ...with one exception: a job the operator has not handled yet reads observedGeneration 0, so
    # kstatus (Flux, kpt) reports it InProgress, not Current (a status without observedGeneration
    # skips the generation check: cli-utils v0.37.2 pkg/kstatus/status/generic.go:73-98)
    schema["default"] = {"observedGeneration": 0}
    return schema


def _drop_defaults(schema: dict[str, Any]) -> None:
    schema.pop("default", None)
    for sub in schema.get("properties", {}).values():
        _drop_defaults(sub)
    if isinstance(schema.get("items"), dict):
        _drop_defaults(schema["items"])


def name_rules() -> list[dict[str, Any]]:
    return [
        api.cel(
            f"self.metadata.name.size() <= {api.MAX_NAME_LENGTH}",
            f"metadata.name must be at most {api.MAX_NAME_LENGTH} characters: the child RayJob carries the same name and KubeRay rejects longer RayJob names",
        ),
        api.cel(
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "metadata.name must be a DNS-1035 label (start with a letter; lowercase letters, digits and '-'): KubeRay requires it of the child RayJob",
        ),
    ]


# `kubectl get lorarljobs` fits 80 columns with a realistic name: what runs, why it is where it
# is (Ready's reason: Training, Queued, Unschedulable, ImagePullBackOff ... docs/troubleshooting.md),
# how far, the reward. `-o wide` (priority 1) adds whether a human must act (Stalled), the total,
# percent, ETA, eval, GPU-hours, training health, placement and the child RayJob.
TRAINING_HEALTHY = '.status.conditions[?(@.type=="TrainingHealthy")].status'
READY_REASON = '.status.conditions[?(@.type=="Ready")].reason'
STALLED = '.status.conditions[?(@.type=="Stalled")].status'
PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Lifecycle phase."},
    {"name": "Reason", "type": "string", "jsonPath": READY_REASON, "description": "Why the job is where it is (the Ready condition's reason)."},
    {"name": "Stalled", "type": "string", "jsonPath": STALLED, "priority": 1, "description": "True: it cannot go on until someone fixes what Reason names."},
    {"name": "Rollout", "type": "integer", "jsonPath": ".status.progress.rollout", "description": "Rollouts completed."},
    {"name": "Total", "type": "integer", "jsonPath": ".status.progress.total", "priority": 1, "description": "Rollouts planned."},
    {"name": "Reward", "type": "number", "jsonPath": ".status.metrics.rawReward", "description": "Latest raw reward."},
    {"name": "Percent", "type": "integer", "jsonPath": ".status.progress.percent", "priority": 1, "description": "Rollouts completed, in percent."},
    {"name": "ETA-Seconds", "type": "integer", "jsonPath": ".status.progress.etaSeconds", "priority": 1, "description": "Estimated seconds to finish."},
    {"name": "Eval", "type": "number", "jsonPath": ".status.eval[0].latest", "priority": 1, "description": "Latest score of the first eval set."},
    {"name": "GPU-Hours", "type": "number", "jsonPath": ".status.progress.gpuHours", "priority": 1, "description": "GPU-hours used so far."},
    {"name": "Healthy", "type": "string", "jsonPath": TRAINING_HEALTHY, "priority": 1, "description": "TrainingHealthy condition."},
    {
        "name": "Logprob-Diff",
        "type": "number",
        "jsonPath": ".status.metrics.trainRolloutLogprobAbsDiffMean",
        "priority": 1,
        "description": "Mean train/rollout logprob abs diff.",
    },
    {"name": "Hardware", "type": "string", "jsonPath": ".spec.hardware.accelerator", "priority": 1, "description": "Accelerator profile."},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.hardware.nodes", "priority": 1, "description": "Nodes."},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "priority": 1, "description": "Base model."},
    {"name": "Checkpoint", "type": "integer", "jsonPath": ".status.checkpoints.latestIteration", "priority": 1, "description": "Latest checkpoint iteration."},
    {"name": "RayJob", "type": "string", "jsonPath": ".status.rayJob.name", "priority": 1, "description": "Child RayJob."},
    {"name": "Adapter", "type": "string", "jsonPath": ".status.adapter.uri", "priority": 1, "description": "Where the exported adapter is (spec.export)."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


# Field selectors the API server answers for LoraRLJobs (GA since Kubernetes 1.32): the operator
# lists unfinished jobs before it is ready (``status.phase!=Succeeded,status.phase!=Failed``) and
# the finished ones afterwards, so its start-up grows with the jobs that run, not with history.
# An absent field selects as the empty string (apiextensions/v1 SelectableField), so a job
# without a status yet is unfinished.
SELECTABLE_FIELDS = [{"jsonPath": ".status.phase"}]


def crd() -> dict[str, Any]:
    root = {
        "type": "object",
        "description": " ".join((api.LoraRLJob.__doc__ or "").split()),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion: lorarl.dev/v1alpha1."},
            "kind": {"type": "string", "description": "Kind: LoraRLJob."},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": name_rules(),
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/name": "lorarl", "app.kubernetes.io/part-of": "lorarl"},
        },
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": list(api.CATEGORIES),
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "selectableFields": SELECTABLE_FIELDS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated by `lorarl crd` from lorarl.api: do not edit by hand.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=1 << 16)


def _declared(schema: dict[str, Any]) -> dict[str, Any]:
    """The part of a schema that says which fields exist (what the API server prunes by)."""
    out: dict[str, Any] = {}
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "properties" in schema:
        out["properties"] = {name: _declared(sub) for name, sub in schema["properties"].items()}
    for key in ("additionalProperties", "items"):
        if isinstance(schema.get(key), dict):
            out[key] = _declared(schema[key])
    return out


def known_fields_json() -> str:
    """The spec's declared fields as lorarl.control.stored reads them (control/known_fields.json):
    the controller prunes a stored object by them without generating the CRD at run time."""
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return json.dumps(_declared(spec), sort_keys=True, separators=(",", ":")) + "\n"
