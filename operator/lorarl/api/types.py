"""The LoraRLJob API (lorarl.dev/v1alpha1), typed once.

This module is the single source of truth for the schema: the CRD in ``crds/`` and
``docs/api.md`` are generated from these models (``lorarl.admission.crdgen`` / ``lorarl.docsgen``) and a
test fails when they drift. Defaults reproduce the validated miles Qwen3-4B GRPO LoRA recipe
(``shared/reference/recipe-qwen3-4b-lora-amd.md``); the ``flag`` metadata on a field names the
``train.py`` flag it becomes, for the generated docs.

Conventions: Python attributes are snake_case, the wire format is camelCase. Optional fields
left unset mean "the hardware profile's (or the recipe's) choice".
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Final, Literal, Required, TypedDict

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict, JsonValue

from . import secret_scanners as scanners

GROUP = "lorarl.dev"
VERSION = "v1alpha1"
API_VERSION: Final = "lorarl.dev/v1alpha1"  # GROUP/VERSION, spelled out: the type of LoraRLJob.api_version
assert f"{GROUP}/{VERSION}" == API_VERSION
KIND: Final = "LoraRLJob"
PLURAL = "lorarljobs"
SINGULAR = "lorarljob"
SHORT_NAMES = ["lrl"]
CATEGORIES = ["all", "lorarl"]

# KubeRay rejects RayJob names longer than this (RayCluster = "<rayjob>-<5 chars>"); the child
# RayJob carries the LoraRLJob's name, so the LoraRLJob name has the same limit.
MAX_NAME_LENGTH = 47
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# Every string that reaches the training command is checked against this: such a token passes
# unchanged through KubeRay's submitter bash, Ray's list2cmdline re-quoting and the head's
# shell (see lorarl.job.command). Anything else could change the command's meaning.
SHELL_SAFE = r"^[A-Za-z0-9_@%+=:,./-]+$"
SHELL_SAFE_HELP = "letters, digits and _@%+=:,./-"
HF_REPO_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"
HF_REPO_ID_HELP = (
    "must be a Hugging Face repository id <org>/<name> (e.g. zhuzilin/dapo-math-17k): two parts joined by one '/', "
    "each starting with a letter or digit, then letters, digits, '.', '_' or '-'"
)
# Inputs from elsewhere: an https:// file or an s3:// object (a prefix ending in '/' for a
# model directory); every character shell-safe, since the downloaded path reaches the command.
INPUT_URI = r"^(https://[A-Za-z0-9.-]+(:[0-9]{1,5})?|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/[A-Za-z0-9_@%+=:,./-]*$"
INPUT_URI_HELP = "must be an https://host/path or s3://bucket/key URI of letters, digits and _@%+=:,./- (no query string)"


def repo_id_rule() -> JsonDict:
    """The repository id syntax as a rule, so that a refusal says in words what is allowed (a
    pattern's refusal shows only the regular expression)."""
    return {"rule": f"self.matches('{HF_REPO_ID}')", "message": HF_REPO_ID_HELP + _ELSEWHERE}


URI_RULE: JsonDict = {"rule": f"self.matches('{INPUT_URI}')", "message": INPUT_URI_HELP}


_ELSEWHERE = "; for a file already on the job's volume set path, for an s3:// or https:// source set uri"
# A path on the job's volume, relative to the input's directory there (/root/models or
# /root/datasets): no absolute path, no '.' or '..' segment, shell-safe.
VOLUME_PATH = r"^[A-Za-z0-9_@%+=:,][A-Za-z0-9_@%+=:,./-]*$"
IDENTIFIER = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A resource quantity is checked with the API server's own parser: the Kubernetes CEL quantity
# library (isQuantity/quantity, k8s.io/apiserver pkg/cel/library/quantity.go, in the CRD
# validation environment since 1.28: pkg/cel/environment/base.go) calls
# k8s.io/apimachinery/pkg/api/resource.ParseQuantity; lorarl.admission.validation implements the same
# grammar for `lorarl validate`. Zero and negative sizes are refused (a pod cannot use them).
QUANTITY_RULE: JsonDict = {
    "rule": "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
    "message": "must be a positive Kubernetes quantity, e.g. 64, 500m, 512Gi or 1e3",
}


def QUANTITY_SCHEMA(schema: dict[str, Any]) -> None:  # noqa: N802 (used like the constants beside it)
    schema["x-kubernetes-validations"] = [dict(QUANTITY_RULE)]


# Kubernetes name syntaxes (k8s.io/apimachinery/pkg/util/validation): a DNS-1123 subdomain, a
# label value, and a qualified name ([DNS subdomain prefix/]name, the name at most 63 characters).
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
_QUALIFIED_NAME_BODY = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME = f"^{_QUALIFIED_NAME_BODY}$"
MAX_QUALIFIED_NAME = 317  # 253 (prefix) + "/" + 63 (name)
# An extended resource is a qualified name with a domain prefix (e.g. amd.com/gpu).
RESOURCE_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
# A container image reference: no whitespace or shell characters (the kubelet refuses those late).
IMAGE = r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$"
# A file inside a dataset repository: relative, no "..": --prompt-data stays under /root/datasets.
REPO_FILE = r"^[A-Za-z0-9_@%+=:,.-][A-Za-z0-9_@%+=:,./-]*$"

ModuleName = Annotated[str, StringConstraints(pattern=IDENTIFIER, max_length=64)]
# A value that reaches a command line as an option's value (hf download --revision R) must not
# look like an option itself: "--help" would be parsed as one (click, which the hf CLI is built
# on, and argparse both read a leading "-" as an option).
NOT_OPTION_RULE: JsonDict = {"rule": "!self.startsWith('-')", "message": "must not start with '-': it would be read as a command-line option"}


def REVISION_SCHEMA(schema: dict[str, Any]) -> None:  # noqa: N802 (used like the constants beside it)
    schema["x-kubernetes-validations"] = [dict(NOT_OPTION_RULE)]


CommandWord = Annotated[str, StringConstraints(pattern=SHELL_SAFE, min_length=1, max_length=256)]
# An extraArgs item: its characters are checked by a CEL rule on the list (EXTRA_ARGS_RULES), not
# by a `pattern` on the item, since the API server quotes a string that fails a pattern (or a CEL
# rule on the string) in its answer ('spec.extraArgs[0]: Invalid value: "--wandb-key=SENTvalue#1":
# should match ...') and a list that fails a rule by its type only ('Invalid value: "array"'): an
# item may hold a secret.
ExtraArg = Annotated[str, StringConstraints(min_length=1, max_length=256)]


def cel_regex(pattern: str) -> str:
    """A regular expression as a CEL string literal's body (inside '...'): backslashes doubled."""
    assert "'" not in pattern, pattern
    return pattern.replace("\\", "\\\\")


def syntax_rules(pattern: str, help_: str, *fields: str) -> list[JsonValue]:
    """The syntax of string fields that may hold a pasted secret, as rules on the object that holds
    them (fieldPath names the field), not as a `pattern`: the API server quotes a refused string
    ('Invalid value: "<the value>"'), a refused object by its type only ("object")."""
    return [cel(f"!has(self.{f}) || self.{f}.matches('{cel_regex(pattern)}')", help_, field_path=f".{f}") for f in fields]


IDENTIFIER_HELP = "must start with a letter or digit, then letters, digits, '_', '.' or '-'"


# A token pasted as a value (a whole item or word, or after "="). The documented shapes: Hugging
# Face (hf_), GitHub (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_), OpenAI-style (sk-), Slack (xox?-),
# AWS access key ids (AKIA), JSON Web Tokens (three base64url parts, the first two starting with
# eyJ, i.e. '{"'), W&B API keys (40 hex digits, "local-" + 40 hex on W&B Server, and the longer
# keys W&B issues since SDK 0.22.3, wandb/wandb#10688: any opaque word of 60 or more letters,
# digits, '_' or '-'). A heuristic: it also refuses a git commit id (40 hex) given as a value,
# which belongs in the revision fields.
#
# To these (ours) the token shapes of two maintained scanners are added (lorarl/api/secret_scanners.py,
# vendored with their licences): every gitleaks rule that knows a token by its own shape (AWS
# AKIA/ASIA..., Google AIza..., Stripe sk_live_..., GitLab glpat-..., npm_..., PyPI, Slack, ...),
# and detect-secrets' AWS secret access key (40 letters, digits, '/' or '+'). Each must be the whole
# value (an item, or what follows '='). Go RE2 syntax that Python's re reads alike (admission.validation.go_regex).
OWN_SHAPES = (
    r"hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abpors]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{4,}[.]eyJ[A-Za-z0-9_-]{4,}[.][A-Za-z0-9_-]*|([A-Za-z0-9]+-)?[0-9A-Fa-f]{40}|[A-Za-z0-9_-]{60,}"
)
ACCESS_KEY_SHAPED_VALUE = f"(^|=)({OWN_SHAPES}|{scanners.gitleaks_tokens()}|{scanners.DETECT_SECRETS_AWS_ACCESS_KEY_SHAPE})$"


def _token_shape_parts(limit: int = 1100) -> list[str]:
    """ACCESS_KEY_SHAPED_VALUE cut into expressions of at most about ``limit`` characters: the API
    server estimates a ``matches`` as (the string's length) x (the expression's length), and one
    rule over the extraArgs items (256 items of 256 characters) with the whole expression would cost
    2.9 times its budget for one rule (10^7). The five rules cost about 30% of the CRD's whole
    budget (10^8; measured on the API server: the CRD's rules with them use about 56%)."""
    shapes = [OWN_SHAPES, *(scanners.token_core(rx) for _, rx in scanners.GITLEAKS_RULES), scanners.DETECT_SECRETS_AWS_ACCESS_KEY_SHAPE]
    parts: list[list[str]] = [[]]
    for shape in shapes:
        if parts[-1] and sum(len(x) + 1 for x in parts[-1]) + len(shape) > limit:
            parts.append([])
        parts[-1].append(shape)
    return [f"(^|=)({'|'.join(part)})$" for part in parts]


ACCESS_KEY_SHAPED_PARTS = _token_shape_parts()
ACCESS_KEY_SHAPED_MESSAGE = (
    "looks like an access token (a shape gitleaks or detect-secrets knows, hf_, a JWT, 40 hex digits, ...): a secret here is stored in etcd and shown in W&B, "
    "Ray and the status; pass credentials through Secret references"
)


def not_token_shaped(*fields: str) -> list[JsonValue]:
    """Refuse token-shaped values of these string fields, by rules on the object that holds them
    (fieldPath names the field): the API server quotes a refused string's value in its message
    ('Invalid value: "<the token>"'), a refused object only by its type ("object"), so the token
    stays out of kubectl's output, a GitOps controller's status and audit records."""
    return [cel(f"!has(self.{f}) || !self.{f}.matches('{cel_regex(ACCESS_KEY_SHAPED_VALUE)}')", ACCESS_KEY_SHAPED_MESSAGE, field_path=f".{f}") for f in fields]


def EXTRA_ARG_ITEM_SCHEMA(schema: dict[str, Any]) -> None:  # noqa: N802 (used like the constants beside it)
    # on the Optional field pydantic's schema is anyOf [array, null]: crdgen merges "items" into the array
    schema.setdefault("items", {})["x-kubernetes-validations"] = [dict(r) for r in EXTRA_ARG_ITEM_RULES]
    schema["x-kubernetes-validations"] = [dict(r) for r in EXTRA_ARGS_RULES]


def flag(name: str) -> dict[str, Any]:
    """Field metadata: the train.py flag a field renders to (documentation only)."""
    return {"flag": name}


def cel(rule: str, message: str, field_path: str | None = None, reason: str | None = None) -> JsonDict:
    """One ``x-kubernetes-validations`` entry."""
    out: dict[str, Any] = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    if reason:
        out["reason"] = reason
    return out


class ApiModel(BaseModel):
    """Base: camelCase on the wire, unknown fields rejected, enum values as strings."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
        validate_default=True,
    )


# --------------------------------------------------------------------------------------- model


class ModelPreset(str, Enum):
    """Architectures known by name (the Qwen3 dense family of the reference)."""

    QWEN3_0_6B = "qwen3-0.6B"
    QWEN3_1_7B = "qwen3-1.7B"
    QWEN3_4B = "qwen3-4B"
    QWEN3_8B = "qwen3-8B"
    QWEN3_14B = "qwen3-14B"
    QWEN3_32B = "qwen3-32B"


class Architecture(ApiModel):
    """Megatron architecture of the model. Either a known ``preset`` or the explicit shape of a
    Qwen3-style dense transformer (SwiGLU, GQA, RoPE, RMSNorm), read from the model's HF
    config.json."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!(has(self.preset) && (has(self.numLayers) || has(self.hiddenSize) || has(self.ffnHiddenSize) || has(self.numAttentionHeads) || has(self.numQueryGroups)))",
                    "set either architecture.preset or the explicit shape (numLayers, hiddenSize, ffnHiddenSize, numAttentionHeads, numQueryGroups), not both",
                ),
                cel(
                    "has(self.preset) || (has(self.numLayers) && has(self.hiddenSize) && has(self.ffnHiddenSize) && has(self.numAttentionHeads) && has(self.numQueryGroups))",
                    "an explicit architecture needs numLayers, hiddenSize, ffnHiddenSize, numAttentionHeads and numQueryGroups (from the model's config.json)",
                ),
            ]
        }
    )

    preset: ModelPreset | None = Field(None, description="A known architecture by name.")
    num_layers: int | None = Field(None, ge=1, le=512, description="config.json num_hidden_layers.", json_schema_extra=flag("--num-layers"))
    hidden_size: int | None = Field(None, ge=1, le=65536, description="config.json hidden_size.", json_schema_extra=flag("--hidden-size"))
    ffn_hidden_size: int | None = Field(None, ge=1, le=262144, description="config.json intermediate_size.", json_schema_extra=flag("--ffn-hidden-size"))
    num_attention_heads: int | None = Field(
        None, ge=1, le=1024, description="config.json num_attention_heads.", json_schema_extra=flag("--num-attention-heads")
    )
    num_query_groups: int | None = Field(None, ge=1, le=1024, description="config.json num_key_value_heads.", json_schema_extra=flag("--num-query-groups"))
    kv_channels: int = Field(128, ge=1, le=4096, description="config.json head_dim.", json_schema_extra=flag("--kv-channels"))
    vocab_size: int = Field(151936, ge=1, le=4194304, description="config.json vocab_size.", json_schema_extra=flag("--vocab-size"))
    rotary_base: int = Field(1000000, ge=1, description="config.json rope_theta.", json_schema_extra=flag("--rotary-base"))
    norm_epsilon: float = Field(1e-6, gt=0, lt=1, description="config.json rms_norm_eps.", json_schema_extra=flag("--norm-epsilon"))
    qk_layernorm: bool = Field(True, description="QK layer norm (Qwen3: true).", json_schema_extra=flag("--qk-layernorm"))
    untie_embeddings_and_output_weights: bool = Field(
        False,
        description="config.json tie_word_embeddings == false.",
        json_schema_extra=flag("--untie-embeddings-and-output-weights"),
    )


# A model name in this family needs no explicit architecture (the preset is inferred).
QWEN3_DENSE_NAME = r"^Qwen/Qwen3-(0\.6B|1\.7B|4B|8B|14B|32B)(-[A-Za-z0-9._-]+)?$"


# a path segment "." or ".." would leave the input's directory
NO_DOT_SEGMENT_RULE: JsonDict = {"rule": "!self.matches('(^|/)[.][.]?(/|$)')", "message": "must stay inside its directory: no '.' or '..' path segment"}
MODEL_SOURCE_RULES = [
    cel("!(has(self.path) && has(self.uri))", "give model.path (on the volume) or model.uri (downloaded), not both", field_path=".uri"),
    cel(
        "!has(self.uri) || (self.uri.startsWith('s3://') && self.uri.endsWith('/'))",
        "a model is a directory: model.uri must be an s3:// prefix ending in '/'",
        field_path=".uri",
    ),
    cel(
        "!has(self.revision) || (!has(self.path) && !has(self.uri))",
        "model.revision is a Hub revision: it goes with neither path nor uri",
        field_path=".revision",
    ),
]


class ModelSpec(ApiModel):
    """The base model, a Hugging Face repository loaded directly through Megatron-Bridge."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.architecture) || self.name.matches('" + QWEN3_DENSE_NAME.replace("\\", "\\\\") + "')",
                    "spec.model.architecture is required for models outside the Qwen3 dense family "
                    "(Qwen/Qwen3-0.6B, -1.7B, -4B, -8B, -14B, -32B): give architecture.preset or its explicit shape",
                ),
                *MODEL_SOURCE_RULES,
            ]
        }
    )

    name: str = Field(
        ...,
        min_length=3,
        max_length=96,
        description="Hugging Face repository id of the base model, e.g. Qwen/Qwen3-4B. Downloaded by the init "
        "container to /root/models/<org>/<name>/<revision, default main>: one directory per repository and revision "
        "(unless path or uri says where the weights are).",
        json_schema_extra={"flag": "--hf-checkpoint", "x-kubernetes-validations": [repo_id_rule()]},
    )
    path: str | None = Field(
        None,
        max_length=256,
        pattern=VOLUME_PATH,
        description="The model directory already on the job's volume, relative to /root/models (e.g. own/qwen3-4b-sft): "
        "nothing is downloaded for it. name still names the architecture.",
        json_schema_extra={"x-kubernetes-validations": [NO_DOT_SEGMENT_RULE]},
    )
    uri: str | None = Field(
        None,
        max_length=512,
        description="Download the model directory from an s3:// prefix ending in '/' (every object under it; "
        "credentials: dataPrep.s3) instead of the Hub. name still names the architecture.",
        json_schema_extra={"x-kubernetes-validations": [URI_RULE]},
    )
    revision: str | None = Field(
        None,
        max_length=64,
        pattern=SHELL_SAFE,
        description="Git revision (branch, tag or commit) to download; default: the repository's default branch.",
        json_schema_extra=REVISION_SCHEMA,
    )
    architecture: Architecture | None = Field(None, description="Megatron architecture; inferred for the Qwen3 dense family from the name.")


# ------------------------------------------------------------------------------------ hardware


class AcceleratorProfile(str, Enum):
    """Known accelerator profiles (see lorarl.job.profiles): AMD Instinct and, beyond the seed, NVIDIA."""

    MI300X = "MI300X"
    MI325X = "MI325X"
    MI350X = "MI350X"
    MI355X = "MI355X"
    H100 = "H100"
    H200 = "H200"
    B200 = "B200"


class Toleration(ApiModel):
    """A core/v1 Toleration, passed to every Ray pod (checked here with the rules the API server
    applies to a pod's tolerations, so a bad one is refused at admission, not when KubeRay
    creates the pods)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.key) || (has(self.operator) && self.operator == 'Exists')",
                    "a toleration without a key must use operator Exists",
                    field_path=".operator",
                ),
                cel(
                    "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
                    "a toleration with operator Exists must not have a value",
                    field_path=".value",
                ),
                cel(
                    "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                    "tolerationSeconds needs effect NoExecute",
                    field_path=".tolerationSeconds",
                ),
            ]
        }
    )

    key: str | None = Field(None, max_length=MAX_QUALIFIED_NAME, pattern=QUALIFIED_NAME, description="Taint key to tolerate (a qualified name).")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal (default Equal).")
    value: str | None = Field(None, max_length=63, pattern=LABEL_VALUE, description="Taint value for operator Equal (label value syntax).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(None, description="Taint effect to tolerate; empty means all.")
    toleration_seconds: int | None = Field(None, description="For NoExecute: how long the pod stays bound.")


LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE)]
GroupId = Annotated[int, Field(ge=1, le=2147483647)]
MAX_NODE_SELECTOR = 32
# Map keys have no schema of their own: their syntax is a CEL rule on the map.
NODE_SELECTOR_KEYS_RULE = cel(
    f"self.all(k, k.size() <= {MAX_QUALIFIED_NAME} && k.matches('{QUALIFIED_NAME.replace(chr(92), chr(92) * 2)}')"
    " && (!k.contains('/') || k.matches('^[^/]{1,253}/')))",
    "hardware.nodeSelector keys must be qualified names (an optional DNS subdomain prefix and '/', then a name of "
    "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
)


class HardwareSpec(ApiModel):
    """Where and on what the job runs. The profile supplies the GPU resource name, images,
    ROCm/CUDA environment and SGLang backends; nodes x gpusPerNode GPUs are requested."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.resourceName) || self.resourceName.startsWith('amd.com/') == (self.accelerator in ['MI300X', 'MI325X', 'MI350X', 'MI355X'])",
                    "hardware.resourceName must be an amd.com/ resource for AMD accelerators and must not be for NVIDIA ones",
                    field_path=".resourceName",
                )
            ]
        }
    )

    accelerator: AcceleratorProfile = Field(..., description="Accelerator profile, e.g. MI355X.")
    nodes: int = Field(
        1,
        ge=1,
        le=128,
        description="Number of nodes (Ray pods); node 0 is the Ray head and trains too.",
        json_schema_extra=flag("--actor-num-nodes"),
    )
    gpus_per_node: int | None = Field(
        None,
        ge=1,
        le=16,
        description="GPUs per node; default: the profile's (8).",
        json_schema_extra=flag("--actor-num-gpus-per-node / --num-gpus-per-node"),
    )
    resource_name: str | None = Field(
        None,
        max_length=253,
        pattern=RESOURCE_NAME,
        description="Override of the extended resource to request, for partitioned GPUs "
        "(e.g. amd.com/cpx_nps4); default: the profile's (amd.com/gpu or nvidia.com/gpu).",
    )
    cpu: str | None = Field(
        None,
        max_length=32,
        description='CPU request per Ray pod (a quantity, e.g. "64" or 500m); default: none.',
        json_schema_extra=QUANTITY_SCHEMA,
    )
    memory: str | None = Field(
        None,
        max_length=32,
        description="Memory request and limit per Ray pod (a quantity, e.g. 512Gi); default: none.",
        json_schema_extra=QUANTITY_SCHEMA,
    )
    shm_size: str = Field(
        "64Gi",
        max_length=32,
        description="Size of the memory-backed /dev/shm of each Ray pod (a quantity).",
        json_schema_extra=QUANTITY_SCHEMA,
    )
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_NODE_SELECTOR,
        description="Extra node labels every Ray pod requires (added to the profile's).",
        json_schema_extra={"x-kubernetes-validations": [NODE_SELECTOR_KEYS_RULE]},
    )
    profile_node_selector: bool = Field(
        True,
        description="Require the profile's node label (AMD node labeller amd.com/gpu.device-id, NVIDIA GPU "
        "feature discovery nvidia.com/gpu.product); turn off where no labeller runs.",
    )
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Tolerations for every Ray pod.")
    device_groups: list[GroupId] = Field(
        default_factory=list,
        max_length=8,
        description="GIDs that own the GPU device nodes on the host (the video and render groups, e.g. 44 and 109 on Ubuntu): "
        "supplementalGroups of the Ray pods, needed with runPolicy.runAsUser on AMD GPUs (the device plugin hands /dev/kfd "
        "and /dev/dri/renderD* as the host's files).",
    )
    affinity: dict[str, Any] | None = Field(
        None,
        description="A core/v1 Affinity for every Ray pod (passed through unchanged).",
        # the CRD embeds the real core/v1 Affinity schema here (lorarl/admission/schemas, see crdgen)
        json_schema_extra={"x-lorarl-core-schema": "core_v1_affinity"},
    )


# ---------------------------------------------------------------------------------------- lora


class LoraSpec(ApiModel):
    """LoRA adapter settings (Megatron-Bridge LoRA)."""

    rank: int = Field(64, ge=1, le=1024, description="LoRA rank.", json_schema_extra=flag("--lora-rank"))
    alpha: int = Field(32, ge=1, le=4096, description="LoRA alpha (scaling = alpha / rank).", json_schema_extra=flag("--lora-alpha"))
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout.", json_schema_extra=flag("--lora-dropout"))
    target_modules: list[ModuleName] = Field(
        default_factory=lambda: ["all-linear"],
        min_length=1,
        max_length=32,
        description="Modules that get adapters (joined with commas), e.g. all-linear or linear_qkv,linear_proj.",
        json_schema_extra=flag("--target-modules"),
    )
    base_cpu_backup: bool = Field(
        True,
        description="Keep a CPU copy of the frozen base weights (colocated rollout offload).",
        json_schema_extra=flag("--lora-base-cpu-backup"),
    )


# ------------------------------------------------------------------------------------- rollout


NO_PARENT_DIR_RULE = cel(
    "!has(self.file) || !self.file.matches('(^|/)[.][.]?(/|$)')",
    "file must name a file inside the dataset repository: no '.' or '..' path segment",
    field_path=".file",
)


DATASET_SOURCE_RULES = [
    cel(
        "[has(self.repo), has(self.path), has(self.uri)].filter(x, x).size() == 1",
        "give exactly one of repo (a Hugging Face dataset), path (a file on the job's volume) or uri (an https:// or s3:// file)",
    ),
    cel(
        "has(self.repo) || (!has(self.file) && !has(self.revision))",
        "file and revision belong to a Hub repo: with path or uri, leave them out",
        field_path=".repo",
    ),
    cel("!has(self.uri) || !self.uri.endsWith('/')", "a dataset is one JSONL file: uri must name a file, not a prefix ending in '/'", field_path=".uri"),
]
DATASET_PATH_HELP = "A JSONL file already on the job's volume, relative to /root/datasets (e.g. own/prompts.jsonl): nothing is downloaded for it."
DATASET_URI_HELP = (
    "Download the JSONL file from an https:// URL (token: dataPrep.httpTokenSecretRef) or an s3:// object (credentials: dataPrep.s3) instead of the Hub."
)


class DatasetRef(ApiModel):
    """A JSONL file: in a Hugging Face dataset repository (downloaded to /root/datasets/<org>/<name>/<revision,
    default main>/), on the job's volume (path), or at an https:// or s3:// URI (uri)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [NO_PARENT_DIR_RULE, *DATASET_SOURCE_RULES]})

    repo: str | None = Field(
        None,
        min_length=3,
        max_length=96,
        description="Dataset repository id, e.g. zhuzilin/dapo-math-17k.",
        json_schema_extra={"x-kubernetes-validations": [repo_id_rule()]},
    )
    path: str | None = Field(
        None, max_length=256, pattern=VOLUME_PATH, description=DATASET_PATH_HELP, json_schema_extra={"x-kubernetes-validations": [NO_DOT_SEGMENT_RULE]}
    )
    uri: str | None = Field(None, max_length=512, description=DATASET_URI_HELP, json_schema_extra={"x-kubernetes-validations": [URI_RULE]})
    file: str | None = Field(
        None,
        max_length=128,
        pattern=REPO_FILE,
        description="File inside the repository (a relative path without '.' or '..' segments); default: <repo name>.jsonl.",
    )
    revision: str | None = Field(None, max_length=64, pattern=SHELL_SAFE, description="Git revision to download.", json_schema_extra=REVISION_SCHEMA)


class RolloutSpec(ApiModel):
    """What the policy generates and how rewards are computed (one rollout = one batch of prompts)."""

    prompt_data: DatasetRef = Field(
        default_factory=lambda: DatasetRef(repo="zhuzilin/dapo-math-17k"),
        description="Training prompts.",
        json_schema_extra=flag("--prompt-data"),
    )
    input_key: str = Field("prompt", max_length=64, pattern=IDENTIFIER, description="JSONL key of the prompt.", json_schema_extra=flag("--input-key"))
    label_key: str = Field("label", max_length=64, pattern=IDENTIFIER, description="JSONL key of the reference answer.", json_schema_extra=flag("--label-key"))
    apply_chat_template: bool = Field(True, description="Wrap prompts in the model's chat template.", json_schema_extra=flag("--apply-chat-template"))
    shuffle: bool = Field(True, description="Shuffle prompts.", json_schema_extra=flag("--rollout-shuffle"))
    balance_data: bool = Field(True, description="Balance tokens across data-parallel ranks.", json_schema_extra=flag("--balance-data"))
    reward_type: str = Field(
        "deepscaler",
        max_length=64,
        pattern=IDENTIFIER,
        description="miles reward model type (rm-type), e.g. deepscaler, math, dapo.",
        json_schema_extra=flag("--rm-type"),
    )
    num_rollouts: int = Field(
        100, ge=1, le=1000000, description="Number of rollouts (= optimizer steps with the default shape).", json_schema_extra=flag("--num-rollout")
    )
    batch_size: int = Field(8, ge=1, le=65536, description="Prompts per rollout.", json_schema_extra=flag("--rollout-batch-size"))
    samples_per_prompt: int = Field(
        8, ge=1, le=1024, description="Responses sampled per prompt (the GRPO group size).", json_schema_extra=flag("--n-samples-per-prompt")
    )
    max_response_length: int = Field(
        8192, ge=1, le=1048576, description="Max generated tokens per response.", json_schema_extra=flag("--rollout-max-response-len")
    )
    temperature: float = Field(1.0, ge=0.0, le=10.0, description="Sampling temperature.", json_schema_extra=flag("--rollout-temperature"))
    global_batch_size: int = Field(
        64,
        ge=1,
        le=1048576,
        description="Samples per optimizer step; batchSize x samplesPerPrompt must be a multiple of it.",
        json_schema_extra=flag("--global-batch-size"),
    )


class EvalDataset(ApiModel):
    """A named evaluation set (from a Hub repo, a path on the job's volume or a URI, as promptData)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                NO_PARENT_DIR_RULE,
                *DATASET_SOURCE_RULES,
                *syntax_rules(IDENTIFIER, IDENTIFIER_HELP, "name"),
                *not_token_shaped("name"),
            ]
        }
    )

    name: str = Field(..., max_length=32, description="Name reported in logs, W&B and status (eval/<name>).")
    repo: str | None = Field(
        None, min_length=3, max_length=96, description="Dataset repository id.", json_schema_extra={"x-kubernetes-validations": [repo_id_rule()]}
    )
    path: str | None = Field(
        None, max_length=256, pattern=VOLUME_PATH, description=DATASET_PATH_HELP, json_schema_extra={"x-kubernetes-validations": [NO_DOT_SEGMENT_RULE]}
    )
    uri: str | None = Field(None, max_length=512, description=DATASET_URI_HELP, json_schema_extra={"x-kubernetes-validations": [URI_RULE]})
    file: str | None = Field(
        None,
        max_length=128,
        pattern=REPO_FILE,
        description="File inside the repository (a relative path without '.' or '..' segments); default: <repo name>.jsonl.",
    )
    revision: str | None = Field(None, max_length=64, pattern=SHELL_SAFE, description="Git revision to download.", json_schema_extra=REVISION_SCHEMA)


class EvalSpec(ApiModel):
    """Periodic evaluation (before training and every interval rollouts)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("!self.enabled || size(self.datasets) > 0", "eval.datasets must not be empty when eval is enabled", field_path=".datasets")
            ]
        }
    )

    enabled: bool = Field(True, description="Run evaluation; when false no eval flag is passed and no eval data is downloaded.")
    interval: int = Field(20, ge=1, le=1000000, description="Evaluate every this many rollouts.", json_schema_extra=flag("--eval-interval"))
    datasets: list[EvalDataset] = Field(
        default_factory=lambda: [EvalDataset(name="aime24", repo="zhuzilin/aime-2024")],
        max_length=16,
        description="Evaluation sets (names must be unique).",
        json_schema_extra={"flag": "--eval-prompt-data", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    samples_per_prompt: int = Field(16, ge=1, le=1024, description="Samples per eval prompt (avg@N).", json_schema_extra=flag("--n-samples-per-eval-prompt"))
    max_response_length: int = Field(
        16384, ge=1, le=1048576, description="Max generated tokens per eval response.", json_schema_extra=flag("--eval-max-response-len")
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling top-p for eval.", json_schema_extra=flag("--eval-top-p"))


# --------------------------------------------------------------------- optimizer and algorithm


class OptimizerSpec(ApiModel):
    """Optimizer of the LoRA parameters."""

    name: Literal["adam", "sgd"] = Field("adam", description="Optimizer.", json_schema_extra=flag("--optimizer"))
    lr: float = Field(2e-5, gt=0.0, le=1.0, description="Learning rate.", json_schema_extra=flag("--lr"))
    lr_decay_style: Literal["constant", "linear", "cosine", "inverse-square-root", "WSD"] = Field(
        "constant", description="Learning-rate schedule.", json_schema_extra=flag("--lr-decay-style")
    )
    weight_decay: float = Field(0.1, ge=0.0, le=10.0, description="Weight decay.", json_schema_extra=flag("--weight-decay"))
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0, description="Adam beta1.", json_schema_extra=flag("--adam-beta1"))
    adam_beta2: float = Field(0.98, ge=0.0, lt=1.0, description="Adam beta2.", json_schema_extra=flag("--adam-beta2"))


class AlgorithmSpec(ApiModel):
    """Policy-gradient algorithm and its coefficients."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.epsClipHigh >= self.epsClip", "algorithm.epsClipHigh must be >= algorithm.epsClip", field_path=".epsClipHigh")
            ]
        }
    )

    advantage_estimator: Literal["grpo", "gspo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo"] = Field(
        "grpo", description="Advantage estimator.", json_schema_extra=flag("--advantage-estimator")
    )
    kl_loss_coef: float = Field(0.0, ge=0.0, le=100.0, description="KL loss coefficient.", json_schema_extra=flag("--kl-loss-coef"))
    kl_loss_type: Literal["k1", "k2", "k3", "low_var_kl"] = Field(
        "low_var_kl", description="KL estimator for the loss.", json_schema_extra=flag("--kl-loss-type")
    )
    kl_coef: float = Field(0.0, ge=0.0, le=100.0, description="KL reward-penalty coefficient.", json_schema_extra=flag("--kl-coef"))
    entropy_coef: float = Field(0.0, ge=0.0, le=100.0, description="Entropy bonus coefficient.", json_schema_extra=flag("--entropy-coef"))
    eps_clip: float = Field(0.2, gt=0.0, le=10.0, description="Lower PPO clip range.", json_schema_extra=flag("--eps-clip"))
    eps_clip_high: float = Field(0.28, gt=0.0, le=10.0, description="Upper PPO clip range (clip-higher).", json_schema_extra=flag("--eps-clip-high"))


SGLangLoraBackend = Literal["triton", "csgmv", "ascend", "torch_native"]
SGLangAttentionBackend = Literal[
    "triton",
    "torch_native",
    "flex_attention",
    "dsa",
    "nsa",
    "dsv4",
    "compressed",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "flashmla",
    "trtllm_mla",
    "cutedsl_mla",
    "tokenspeed_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
]


class SGLangSpec(ApiModel):
    """The SGLang rollout engine (colocated with training)."""

    gpus_per_engine: int = Field(
        1,
        ge=1,
        le=16,
        description="GPUs per SGLang engine (tensor parallel of rollout); must divide the job's GPUs.",
        json_schema_extra=flag("--rollout-num-gpus-per-engine"),
    )
    mem_fraction_static: float = Field(
        0.4,
        gt=0.0,
        lt=1.0,
        description="Fraction of GPU memory SGLang reserves (weights + KV cache).",
        json_schema_extra=flag("--sglang-mem-fraction-static"),
    )
    decode_log_interval: int = Field(1000, ge=1, description="SGLang decode log interval.", json_schema_extra=flag("--sglang-decode-log-interval"))
    chunked_prefill_size: int = Field(4096, ge=-1, description="Chunked prefill size (-1 disables).", json_schema_extra=flag("--sglang-chunked-prefill-size"))
    # these two take the choices of miles' parser (its dump, train-py-options-miles-31f1ca9.json):
    # any other identifier would pass admission and fail the trainer's argparse
    lora_backend: SGLangLoraBackend | None = Field(
        None,
        description="SGLang LoRA backend; default: the profile's (triton on ROCm, SGLang's own default on CUDA).",
        json_schema_extra=flag("--sglang-lora-backend"),
    )
    attention_backend: SGLangAttentionBackend | None = Field(
        None,
        description="SGLang attention backend; default: the profile's (triton on ROCm, SGLang's own default on CUDA).",
        json_schema_extra=flag("--sglang-attention-backend"),
    )


# -------------------------------------------------------------------------- storage/checkpoint


class StorageSpec(ApiModel):
    """Volume for models (/root/models), datasets (/root/datasets) and checkpoints
    (/root/shared_data). Either an existing PVC, or a PVC the job owns (deleted with it)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.existingClaim) || (!has(self.size) && !has(self.storageClassName) && !has(self.accessModes))",
                    "storage.existingClaim cannot be combined with size, storageClassName or accessModes (those describe a PVC the job owns)",
                ),
            ]
        }
    )

    existing_claim: str | None = Field(None, max_length=253, pattern=DNS1123_SUBDOMAIN, description="Name of an existing PVC in the job's namespace.")
    size: str | None = Field(None, max_length=32, description="Size of the owned PVC (a quantity); default 200Gi.", json_schema_extra=QUANTITY_SCHEMA)
    storage_class_name: str | None = Field(
        None,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN.replace("^", "^(", 1).replace("$", ")?$"),
        description='StorageClass of the owned PVC (a DNS subdomain); default (also when ""): the cluster default.',
    )
    access_modes: list[Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]] | None = Field(
        None,
        max_length=3,
        description="Access modes of the owned PVC; default ReadWriteOnce for one node, ReadWriteMany for more.",
    )


class CheckpointSpec(ApiModel):
    """Checkpointing and resume."""

    save_interval: int = Field(
        50, ge=1, le=1000000, description="Save the adapter every this many rollouts (and at the last one).", json_schema_extra=flag("--save-interval")
    )
    resume: bool = Field(
        True,
        description="On a retry or a re-created RayJob, continue from the newest complete checkpoint of any attempt, training only the remaining rollouts into the attempt's own directory (docs/status.md); off: each attempt starts over.",
        json_schema_extra=flag("--lora-adapter-path"),
    )
    storage: StorageSpec = Field(default_factory=StorageSpec, description="Where models, datasets and checkpoints live.")
    retain: Literal["Delete", "Retain"] = Field(
        "Delete",
        description="What becomes of the claim the job owns (and its checkpoints) when the LoraRLJob is deleted, by hand, by "
        "ttlSecondsAfterFinished or by `kubectl delete all`: Delete (with the job, through its owner reference) or Retain "
        "(no owner reference: kept, and found again by a LoraRLJob of the same name). An existingClaim is never deleted. "
        "Mutable (docs/adapters.md#keep-speccheckpointretain).",
    )


# ------------------------------------------------------------------------------------ tracking


class SecretKeyRef(ApiModel):
    """A key in a Secret of the job's namespace. Only the reference is stored, never the value."""

    name: str = Field(..., max_length=253, pattern=K8S_NAME, description="Secret name.")
    key: str = Field(..., max_length=253, pattern=r"^[-._a-zA-Z0-9]+$", description="Key within the Secret.")


class WandbSpec(ApiModel):
    """Weights & Biases. The API key reaches the trainer as WANDB_API_KEY from the Secret, never as
    a flag."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [*syntax_rules(IDENTIFIER, IDENTIFIER_HELP, "project", "team", "group"), *not_token_shaped("project", "team", "group")]
        }
    )

    project: str = Field(
        "miles-run_qwen3_4b_lora",
        max_length=128,
        description="W&B project.",
        json_schema_extra=flag("--wandb-project"),
    )
    team: str | None = Field(None, max_length=128, description="W&B team (entity).", json_schema_extra=flag("--wandb-team"))
    group: str | None = Field(
        None,
        max_length=128,
        description="W&B group; default: the job name.",
        json_schema_extra=flag("--wandb-group"),
    )
    api_key_secret_ref: SecretKeyRef = Field(..., description="Secret key holding the W&B API key.")
    host: str | None = Field(None, max_length=253, pattern=r"^https?://[A-Za-z0-9.:/_-]+$", description="Self-hosted W&B server URL (WANDB_BASE_URL).")


class TrackingSpec(ApiModel):
    """Experiment tracking."""

    wandb: WandbSpec | None = Field(None, description="Log to Weights & Biases; omitted: W&B off.")


class S3Spec(ApiModel):
    """An S3 or S3-compatible store (MinIO, Ceph RGW, ...) for s3:// inputs. The keys reach the
    init container from the Secret as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, never in the spec."""

    endpoint: str | None = Field(
        None,
        max_length=253,
        pattern=r"^https?://[A-Za-z0-9.:/_-]+$",
        description="Endpoint of an S3-compatible store (AWS_ENDPOINT_URL), e.g. https://minio.data:9000; default: AWS S3.",
    )
    region: str = Field("us-east-1", max_length=32, pattern=r"^[a-z0-9-]+$", description="Region to sign requests for (AWS_DEFAULT_REGION).")
    credentials_secret_name: str | None = Field(
        None,
        max_length=253,
        pattern=K8S_NAME,
        description="Secret in the job's namespace with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; default: none (a public bucket, or the pod's own identity).",
    )


class DataPrepSpec(ApiModel):
    """The init container that downloads the model and datasets (idempotent and resumable)."""

    hf_token_secret_ref: SecretKeyRef | None = Field(None, description="Secret key holding a Hugging Face token (HF_TOKEN) for gated or private repositories.")
    endpoint: str | None = Field(
        None,
        max_length=253,
        pattern=r"^https?://[A-Za-z0-9.:/_-]+$",
        description="Hugging Face endpoint or mirror (HF_ENDPOINT), e.g. https://hf-mirror.com.",
    )
    image: str | None = Field(
        None,
        max_length=512,
        pattern=IMAGE,
        description="Image of the init container; it must provide hf (huggingface_hub) and flock (util-linux). Default: the training image.",
    )
    skip: bool = Field(False, description="Inputs are already on the volume: run no download (to skip one input, give its path instead).")
    s3: S3Spec | None = Field(None, description="Where and as whom s3:// inputs are read.")
    http_token_secret_ref: SecretKeyRef | None = Field(
        None, description="Secret key holding a bearer token sent with https:// inputs (Authorization: Bearer); default: none."
    )


# -------------------------------------------------------------------------------------- export

S3_BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
# a key prefix: empty or ending in '/', segments of letters, digits and _.=+-, none '.' or '..'
KEY_PREFIX = r"^([A-Za-z0-9_=+-][A-Za-z0-9_.=+-]*/)*$"
ENDPOINT = r"^https?://[A-Za-z0-9.:/_-]+$"
# an OCI repository without tag or digest: registry host[:port]/path (distribution's reference grammar, lowercase path)
OCI_REPOSITORY = r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)+$"
OCI_TAG = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$"


# Hosts a URL of the export or the load must not name (issue 35; docs/security.md): loopback
# (127.0.0.0/8, localhost and names under .localhost, RFC 6761), 0.0.0.0/8 (this host), link-local
# (169.254.0.0/16: the node's and the cloud's metadata services), an IPv4 address in any form but
# four decimal numbers (inet_aton, which the pods resolve through, reads 2130706433, 0x7f.1 and
# 0177.0.0.1 as 127.0.0.1) and IPv6 without brackets (none of the URL patterns admit brackets).
# Names are judged in the pods, once resolved (lorarl.adapter.egress): kubernetes.default.svc
# cannot be told from a server's name here, nor the cluster's own ranges, which no schema knows.
_DECIMAL_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_CANONICAL_IPV4 = f"({_DECIMAL_OCTET}[.]){{3}}{_DECIMAL_OCTET}"
_NUMERIC_HOST = "(0x[0-9a-f]*|[0-9]+)([.](0x[0-9a-f]*|[0-9]+))*[.]?"
_REFUSED_HOST = "([a-z0-9-]*[.])*localhost[.]?|(127|0)([.][0-9]+){3}|169[.]254([.][0-9]+){2}"
INTERNAL_HOST_MESSAGE = (
    "must not name a loopback, unspecified or link-local host (localhost, 127.0.0.0/8, 0.0.0.0/8, 169.254.0.0/16: the pod "
    "itself, the node's or the cloud's metadata service), and an IP address only as four decimal numbers (docs/security.md)"
)


def internal_host_rules(prefix: str, end: str) -> list[JsonValue]:
    """The CEL rule refusing those hosts in a field of the form ``<prefix><host><end>``."""
    at = f"{prefix}({{}}){end}"
    refused = at.format(_REFUSED_HOST)
    numeric, canonical = at.format(_NUMERIC_HOST), at.format(_CANONICAL_IPV4)
    return [
        cel(
            f"!self.matches('(?i){refused}') && !(self.matches('(?i){numeric}') && !self.matches('{canonical}'))"
            + (f" && !self.matches('{prefix}[^/]*:[^/]*:')" if prefix else ""),
            INTERNAL_HOST_MESSAGE,
        )
    ]


URL_HOST_RULES = internal_host_rules("^https?://", "(:[0-9]*)?(/|$)")
REGISTRY_HOST_RULES = internal_host_rules("^", "(:[0-9]*)?/")


class S3Destination(ApiModel):
    """An S3 or S3-compatible bucket. Objects go under <prefix><namespace>/<job>/rollout-<NNNNNNN>/; the keys reach
    the export pod from the Secret as environment variables, never in the spec."""

    bucket: str = Field(..., max_length=63, pattern=S3_BUCKET, description="Bucket name.")
    prefix: str = Field("", max_length=512, pattern=KEY_PREFIX, description="Key prefix, empty or ending in '/'.")
    endpoint: str | None = Field(
        None,
        max_length=253,
        pattern=ENDPOINT,
        description="Endpoint of an S3-compatible store, e.g. https://minio.data:9000; default: AWS S3.",
        json_schema_extra={"x-kubernetes-validations": URL_HOST_RULES},
    )
    region: str = Field("us-east-1", max_length=32, pattern=r"^[a-z0-9-]+$", description="Region to sign requests for.")
    credentials_secret_name: str | None = Field(
        None,
        max_length=253,
        pattern=K8S_NAME,
        description="Secret in the job's namespace with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; default: the pod's own identity.",
    )


class ClaimDestination(ApiModel):
    """A directory on a PersistentVolumeClaim of the user's (e.g. one an inference server mounts)."""

    claim_name: str = Field(..., max_length=253, pattern=DNS1123_SUBDOMAIN, description="PVC in the job's namespace.")
    path: str = Field(
        "",
        max_length=256,
        pattern=r"^([A-Za-z0-9_@%+=:,][A-Za-z0-9_@%+=:,.-]*/)*$",
        description="Directory in the claim, empty or ending in '/'; the adapter goes to <path><namespace>/<job>/rollout-<NNNNNNN>/.",
        json_schema_extra={"x-kubernetes-validations": [NO_DOT_SEGMENT_RULE]},
    )


class OciDestination(ApiModel):
    """An OCI registry: the adapter as one OCI artifact, laid out as ORAS pushes files (artifactType
    application/vnd.lorarl.adapter.v1, the empty config, one layer per file titled with its name)."""

    repository: str = Field(
        ...,
        max_length=255,
        pattern=OCI_REPOSITORY,
        description="registry[:port]/path, without tag.",
        json_schema_extra={"x-kubernetes-validations": REGISTRY_HOST_RULES},
    )
    tag: str | None = Field(None, max_length=128, pattern=OCI_TAG, description="Tag; default: <job>-rollout-<N>.")
    credentials_secret_name: str | None = Field(
        None, max_length=253, pattern=K8S_NAME, description="A kubernetes.io/dockerconfigjson Secret in the job's namespace."
    )
    plain_http: bool = Field(False, description="Reach the registry over HTTP, not HTTPS (as oras --plain-http): only for a registry on a trusted network.")


class HubDestination(ApiModel):
    """A Hugging Face Hub model repository: the adapter's files as one commit on the branch (huggingface_hub's create_commit);
    status.adapter.uri is hf://<repo>@<commit id>."""

    repo: str = Field(..., max_length=96, description="Repository id <org>/<name>.", json_schema_extra={"x-kubernetes-validations": [repo_id_rule()]})
    revision: str = Field("main", max_length=64, pattern=SHELL_SAFE, description="Branch to commit to.", json_schema_extra=REVISION_SCHEMA)
    token_secret_ref: SecretKeyRef = Field(..., description="Secret key holding a Hub token with write access.")
    endpoint: str | None = Field(
        None, max_length=253, pattern=ENDPOINT, description="Hub endpoint (HF_ENDPOINT).", json_schema_extra={"x-kubernetes-validations": URL_HOST_RULES}
    )


class ExportDestination(ApiModel):
    """One place the adapter is exported to: exactly one of s3, claim, oci, hub."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "[has(self.s3), has(self.claim), has(self.oci), has(self.hub)].filter(x, x).size() == 1",
                    "give exactly one of s3, claim, oci or hub in each export destination",
                )
            ]
        }
    )

    s3: S3Destination | None = Field(None, description="An S3-compatible bucket.")
    claim: ClaimDestination | None = Field(None, description="A directory on a PVC of the user's.")
    oci: OciDestination | None = Field(None, description="An OCI registry (an OCI artifact, as ORAS pushes files).")
    hub: HubDestination | None = Field(None, description="The Hugging Face Hub (one commit to a model repo).")


class ExportSpec(ApiModel):
    """Export the trained adapter after the run succeeded: the newest complete save, checked against spec.lora and
    the base model, as PEFT safetensors with adapter_config.json and a manifest of sha256 digests (docs/adapters.md)."""

    destinations: list[ExportDestination] = Field(..., min_length=1, max_length=4, description="Where the adapter goes.")
    image: str | None = Field(
        None,
        max_length=512,
        pattern=IMAGE,
        description="Image of the export pod; it must provide python3 (with botocore for s3, oras for oci, huggingface_hub for hub). Default: the operator's tools image (`lorarl run --tools-image`), which has them.",
    )
    backoff_limit: int = Field(2, ge=0, le=10, description="Retries of the export Job.")
    on_save: bool = Field(
        False,
        description="Also export while the run goes on: each newly complete save (status.checkpoints.latestIteration) gets an export Job "
        "of its own, at most one at a time; status.adapter shows the newest exported. The export after Succeeded stays (docs/adapters.md).",
    )


# --------------------------------------------------------------------------------------- serve

SERVER_URL = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$"
# SGLang takes any string as lora_name; kept to what reads plainly in a URL, a log and `model=`
ADAPTER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
SERVER_PATH = r"^/[A-Za-z0-9_@%+=:,./-]*$"


class ServeSpec(ApiModel):
    """Load the exported adapter into a running SGLang server (POST /load_lora_adapter) once AdapterExported is True
    (docs/adapters.md). The load runs in-cluster, in a Job of the job's; AdapterServed and status.serving say how it went."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.adapterPath) != has(self.claimMountPath)",
                    "give exactly one of serve.adapterPath (the adapter directory as the server sees it) or serve.claimMountPath "
                    "(where the server mounts the export's claim destination)",
                )
            ]
        }
    )

    url: str = Field(
        ...,
        max_length=253,
        pattern=SERVER_URL,
        description="The SGLang server's base URL, e.g. http://sglang.serving.svc:30000.",
        json_schema_extra={"x-kubernetes-validations": URL_HOST_RULES},
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        None, description="Secret key holding the server's --api-key (or --admin-api-key), sent as a Bearer token; default: none."
    )
    adapter_name: str | None = Field(
        None, max_length=128, pattern=ADAPTER_NAME, description="The lora_name it is served under (model=<name> in requests); default: the job's name."
    )
    adapter_path: str | None = Field(
        None, max_length=512, pattern=SERVER_PATH, description="The adapter directory as the server sees it (holding adapter_config.json)."
    )
    claim_mount_path: str | None = Field(
        None,
        max_length=256,
        pattern=SERVER_PATH,
        description="Where the server mounts the claim of the export's first claim destination; "
        "the adapter is then at <claimMountPath>/<path><namespace>/<job>/rollout-<NNNNNNN>.",
    )
    replace: bool = Field(
        False,
        description="When the server already serves an adapter of that name: unload it and load this one (it is not served in between). "
        "Default: refuse (AdapterServed=False, AdapterNameTaken).",
    )
    image: str | None = Field(None, max_length=512, pattern=IMAGE, description="Image of the load pod; it must provide python3. Default: the export's image.")
    backoff_limit: int = Field(2, ge=0, le=10, description="Retries of the load Job while the server cannot be reached.")


# ------------------------------------------------------------------------------ run and health


HOLD_GPUS_RULES: list[JsonValue] = [
    cel(
        "!has(self.ttlSecondsAfterFinished) || self.holdGpusAfterFinishSeconds == 0 || self.holdGpusAfterFinishSeconds == self.ttlSecondsAfterFinished",
        "runPolicy.ttlSecondsAfterFinished is the deprecated name of runPolicy.holdGpusAfterFinishSeconds: give one of them",
        field_path=".ttlSecondsAfterFinished",
    )
]


class RunPolicy(ApiModel):
    """How the RayJob runs: image, deadlines, retries, cleanup."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": HOLD_GPUS_RULES})

    image: str | None = Field(None, max_length=512, pattern=IMAGE, description="Training image override; default: the profile's miles image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent", description="Image pull policy of the Ray containers.")
    active_deadline_seconds: int = Field(
        172800,
        ge=60,
        le=2147483647,
        description="Deadline for the whole run (KubeRay activeDeadlineSeconds); also ends runs stuck before Running.",
    )
    startup_timeout_seconds: int = Field(
        3600,
        ge=60,
        le=2147483647,
        description="The operator marks the job Stalled when the RayJob has not reached Running this long after creation (image pulls, unschedulable pods, crash-looping head).",
    )
    backoff_limit: int = Field(
        0,
        ge=0,
        le=100,
        description="RayJob retries after a failed run (each retry is a new RayCluster; with checkpoint.resume it continues from the latest checkpoint).",
    )
    submitter_backoff_limit: int = Field(2, ge=0, le=10, description="Retries of the submitter Job (KubeRay submitterConfig.backoffLimit).")
    hold_gpus_after_finish_seconds: int = Field(
        0,
        ge=0,
        le=2147483647,
        description="Keep the finished run's RayCluster, its pods and the GPUs they hold, this many seconds after the run "
        "ends (Succeeded or Failed), e.g. to kubectl exec into the head; the GPUs stay allocated to this job meanwhile (and "
        "count in status.progress.gpuHours), so no other job can use them. Default 0: KubeRay deletes the RayCluster as "
        "soon as the RayJob finishes; the trainer's log stays readable with `lorarl logs` and the status keeps the metrics.",
    )
    ttl_seconds_after_finished: int | None = Field(
        None,
        ge=0,
        le=2147483647,
        description="Deprecated: the old name of holdGpusAfterFinishSeconds (its default was 600 s of idle GPUs; the "
        "default is now 0). When set, the finished RayCluster and its GPUs are still kept this long. Not both.",
    )
    run_as_user: int | None = Field(
        None,
        ge=1,
        le=2147483647,
        description="Run every container as this non-root UID (runAsNonRoot; fsGroup and runAsGroup: the same number): "
        "then the Ray pods meet Pod Security restricted. The image must let that user read the trainer and "
        "write HOME and /tmp (docs/security.md#pods). Default: the image's user (root in the miles images).",
    )

    def hold_gpus_seconds(self) -> int:
        """Seconds KubeRay keeps the finished RayCluster (its ttlSecondsAfterFinished): the new field,
        else the deprecated one's value, else 0 (the CRD's rule refuses two different values)."""
        if self.hold_gpus_after_finish_seconds or self.ttl_seconds_after_finished is None:
            return self.hold_gpus_after_finish_seconds
        return self.ttl_seconds_after_finished


class SchedulingSpec(ApiModel):
    """Cluster scheduling integration. Immutable: create a new LoraRLJob to change it (KubeRay would
    not carry a change to the RayCluster that runs)."""

    priority_class_name: str | None = Field(None, max_length=253, pattern=K8S_NAME, description="PriorityClass of the Ray pods.")
    queue_name: str | None = Field(
        None,
        max_length=63,
        pattern=K8S_NAME,
        description="Kueue LocalQueue; the RayJob is created suspended with the kueue.x-k8s.io/queue-name label and Kueue admits it.",
    )
    workload_priority_class_name: str | None = Field(
        None,
        max_length=253,
        pattern=K8S_NAME,
        description="Kueue WorkloadPriorityClass of the run (the kueue.x-k8s.io/priority-class label): its priority in the queue and for preemption.",
    )
    service_account_name: str | None = Field(
        None,
        max_length=253,
        pattern=K8S_NAME,
        description="ServiceAccount of the Ray pods; default: the per-job one the operator creates (it may only update this job's status).",
    )


class HealthSpec(ApiModel):
    """Training-health thresholds that drive the TrainingHealthy condition."""

    max_logprob_abs_diff: float = Field(
        0.03,
        gt=0.0,
        le=10.0,
        description="Upper bound for the mean train/train_rollout_logprob_abs_diff (training vs rollout engine mismatch); the recipe's validation bar.",
    )
    min_eval_score: float | None = Field(
        None, ge=0.0, le=1.0, description="Lowest acceptable latest eval score (any eval set), checked after the first eval after training began."
    )
    stop_on_unhealthy: Literal["Never", "Suspend", "Stop"] = Field(
        "Never", description="What to do when TrainingHealthy turns False: keep running, suspend the RayJob, or stop it (the job fails)."
    )
    progress_timeout_seconds: int | None = Field(
        None,
        ge=60,
        le=604800,
        description="Seconds without a progress update from the in-job reporter while Running before the job is Stalled (reason NoProgress). "
        "Default: 10 times the observed time per rollout, at least 1800 (3600 before the pace is known). "
        "With stopOnUnhealthy Suspend or Stop, TrainingHealthy turns False (NoProgress) too and the run is suspended or stopped.",
    )


# ---------------------------------------------------------------------------------------- spec


# scheduling is immutable too: its values live in the Ray pod templates and the RayJob's Kueue
# label, and KubeRay does not carry a template change to a RayCluster that exists, so an edit
# would be silently ignored until some later attempt; refusing it says so at once.
IMMUTABLE_FIELDS = ["model", "hardware", "lora", "rollout", "eval", "optimizer", "algorithm", "sglang", "dataPrep", "tracking", "scheduling"]


def _immutable_rules() -> list[JsonValue]:
    rules: list[JsonValue] = [
        cel(
            f"self.{f} == oldSelf.{f}",
            f"spec.{f} is immutable: create a new LoraRLJob (or delete and re-create this one) to change it",
            field_path=f".{f}",
        )
        for f in IMMUTABLE_FIELDS
    ]
    # checkpoint.retain stays mutable: deciding to keep a run's checkpoints must not need a new run
    rules.append(
        cel(
            " && ".join(f"self.checkpoint.{k} == oldSelf.checkpoint.{k}" for k in ("saveInterval", "resume", "storage")),
            "spec.checkpoint is immutable except retain: create a new LoraRLJob (or delete and re-create this one) to change it",
            field_path=".checkpoint",
        )
    )
    rules.append(
        cel(
            "has(self.extraArgs) == has(oldSelf.extraArgs) && (!has(self.extraArgs) || self.extraArgs == oldSelf.extraArgs)",
            "spec.extraArgs is immutable: create a new LoraRLJob to change it",
            field_path=".extraArgs",
        )
    )
    rules.append(
        cel(
            "has(self.runPolicy.image) == has(oldSelf.runPolicy.image) && (!has(self.runPolicy.image) || self.runPolicy.image == oldSelf.runPolicy.image)",
            "spec.runPolicy.image is immutable: create a new LoraRLJob to change it",
            field_path=".runPolicy.image",
        )
    )
    return rules


SPEC_RULES: list[JsonValue] = [
    cel(
        "(self.rollout.batchSize * self.rollout.samplesPerPrompt) % self.rollout.globalBatchSize == 0",
        "rollout.batchSize x rollout.samplesPerPrompt must be a multiple of rollout.globalBatchSize "
        "(the recipe: 8 x 8 = 64 = globalBatchSize, one optimizer step per rollout)",
        field_path=".rollout.globalBatchSize",
    ),
    cel(
        "self.algorithm.advantageEstimator != 'grpo' || self.rollout.samplesPerPrompt >= 2",
        "GRPO compares responses within a group: rollout.samplesPerPrompt must be at least 2",
        field_path=".rollout.samplesPerPrompt",
    ),
    cel(
        "(has(self.hardware.gpusPerNode) ? self.hardware.gpusPerNode : 8) % self.sglang.gpusPerEngine == 0",
        "sglang.gpusPerEngine must divide hardware.gpusPerNode (8 when unset)",
        field_path=".sglang.gpusPerEngine",
    ),
    cel(
        "self.hardware.nodes == 1 || !has(self.checkpoint.storage.accessModes) || 'ReadWriteMany' in self.checkpoint.storage.accessModes",
        "a multi-node job shares its volume between nodes: checkpoint.storage.accessModes must include ReadWriteMany",
        field_path=".checkpoint.storage.accessModes",
    ),
    cel(
        "!self.eval.enabled || self.eval.interval <= self.rollout.numRollouts",
        "eval.interval is larger than rollout.numRollouts: only the pre-training eval would run; lower it or disable eval",
        field_path=".eval.interval",
    ),
    cel("!has(self.serve) || has(self.export)", "spec.serve loads the exported adapter: it needs spec.export", field_path=".serve"),
    cel(
        "!has(self.serve) || !has(self.serve.claimMountPath) || (has(self.export) && self.export.destinations.exists(d, has(d.claim)))",
        "spec.serve.claimMountPath names where the server mounts the export's claim: spec.export needs a claim destination",
        field_path=".serve.claimMountPath",
    ),
]


# Credentials never go on the command line (it is stored in etcd, shown by Ray and in logs). A
# heuristic, so it errs on the side of refusing: a flag whose name holds a credential word is
# refused, except the flags of miles' own parser that hold such a word and are not credentials
# (JSONL keys, token counts and ids, model shapes; the list is checked against the dump of miles'
# real parser, hack/images/job/miles/miles_standin/train-py-options-*.json, by
# tests/security/test_credential_screen.py). The words are the scanners' (lorarl/api/secret_scanners.py):
# gitleaks' generic-api-key keywords, anywhere in the name, except "access" and "api", which name
# no credential by themselves (--sglang-uvicorn-access-log-..., --multi-lora-api-port: gitleaks
# needs a random-looking value after them); detect-secrets' keyword list, anywhere; and of
# detect-secrets' AWS secret keywords the short "pw" as a word of its own (between '-', '_', '.')
# and "pass" as the last word ("forward-pass" is no credential). Ours on top, which neither scanner
# has: bearer, cookie, passphrase anywhere, "tok" as a word of its own (--hf-tok). "tokens"
# (counts) and "tokeni..." (tokenizer) are not the word "token".
_ANYWHERE = [
    *(k.replace("token", "token([^si]|$)") for k in scanners.GITLEAKS_GENERIC_KEYWORDS if k not in ("access", "(?-i:[Aa]pi|API)")),
    *(k for k in scanners.DETECT_SECRETS_KEYWORD_DENYLIST if k.isascii()),  # a flag is ASCII (SHELL_SAFE)
    "passw", "bearer", "cookie", "passphrase",
]  # fmt: skip
CREDENTIAL_FLAG = r"(?i)^--?[a-z0-9._-]*(" + "|".join(_ANYWHERE) + r"|(^--?|[-_.])(pw|tok)($|[-_.=])|(^--?|[-_.])pass($|=))"
NOT_A_CREDENTIAL_FLAGS = (
    # JSONL keys (data, not credentials)
    "input-key", "label-key", "metadata-key", "tool-key", "reward-key", "multimodal-keys",
    "opd-teacher-key", "ci-metric-checker-key",
    # model shapes (Megatron)
    "apply-query-key-layer-scaling", "linear-key-head-dim", "linear-num-key-heads",
    # token counts, ids and special tokens
    "calculate-per-token-loss", "rollout-stop-token-ids", "rl-skip-bos-token", "no-rl-skip-bos-token",
    "fim-eod-token", "fim-middle-token", "fim-pad-token", "fim-prefix-token", "fim-suffix-token",
    "moe-token-dispatcher-type", "moe-token-drop-policy",
    "tiktoken-num-special-tokens", "tiktoken-pattern", "tiktoken-special-tokens",
    "sglang-bucket-inter-token-latency", "sglang-bucket-time-to-first-token", "sglang-kt-max-deferred-experts-per-token",
    "sglang-prefill-delayer-token-usage-low-watermark", "sglang-speculative-token-map", "sglang-tbo-token-distribution-threshold",
)  # fmt: skip
# each also with miles' eval- prefix (--eval-input-key, --eval-sglang-speculative-token-map, ...)
NOT_A_CREDENTIAL_FLAG = "^--(eval-)?(" + "|".join(NOT_A_CREDENTIAL_FLAGS) + ")(=.*)?$"

# Model parallelism given in extraArgs as "--<flag>", "<n>": the data-parallel size is
# GPUs / (tensor x pipeline x context), and Megatron refuses a globalBatchSize it cannot split.
MODEL_PARALLEL_FLAGS = ["--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size"]
_GPUS = "(self.hardware.nodes * (has(self.hardware.gpusPerNode) ? self.hardware.gpusPerNode : 8))"
_SIZE_VALUE = "^[1-9][0-9]{0,3}$"


def _parallel_size(flag_name: str) -> str:
    at = f"self.extraArgs.indexOf('{flag_name}')"
    return f"({at} >= 0 && {at} + 1 < size(self.extraArgs) && self.extraArgs[{at} + 1].matches('{_SIZE_VALUE}') ? int(self.extraArgs[{at} + 1]) : 1)"


_MODEL_PARALLEL = "(!has(self.extraArgs) ? 1 : " + " * ".join(_parallel_size(f) for f in MODEL_PARALLEL_FLAGS) + ")"

CREDENTIAL_FLAG_MESSAGE = (
    "a credential-like flag (key, token, secret, password, auth, bearer... anywhere in its name; pw, tok as a word) would put a secret on the command line; "
    "use spec.tracking.wandb.apiKeySecretRef / spec.dataPrep.hfTokenSecretRef"
)

# Rules on each item, so that a refusal names the element (spec.extraArgs[3]), as the API server
# reports a rule of an `items` schema; lorarl.admission.crdgen adds the spec-owned flags rule.
EXTRA_ARG_ITEM_RULES: list[JsonDict] = [
    # a bare flag (no '='), named by its index; an item with '=' may carry the secret itself, and
    # an item with a character outside SHELL_SAFE may be one glued on: the list-level rules below
    # refuse those unechoed
    cel(
        f"self.contains('=') || !self.matches('{SHELL_SAFE}') || !self.matches('{CREDENTIAL_FLAG}') || self.matches('{NOT_A_CREDENTIAL_FLAG}')",
        CREDENTIAL_FLAG_MESSAGE,
    ),
]

# On the list, not on each item: the API server quotes a refused string in its answer, whether a
# `pattern` or a CEL rule on the string refused it ('spec.extraArgs[0]: Invalid value:
# "--wandb-key=SENTvalue#1": ...'), and a refused list by its type only ('Invalid value: "array"'),
# so that what the item holds stays out of the answer (and of whatever shows it: kubectl, a
# GitOps controller's status, audit records). tests/security/test_credential_screen.py reads the
# API server's whole answer for each.
EXTRA_ARGS_RULES: list[JsonDict] = [
    # the characters a word may hold, as a rule on the list and not a `pattern` on the items (ExtraArg)
    # (a messageExpression naming the item's index costs more than the API server's budget for one)
    cel(f"self.all(a, a.matches('{SHELL_SAFE}'))", f"each item may hold only {SHELL_SAFE_HELP} (it passes through shells); the item is not repeated here"),
    cel(
        f"!self.exists(a, a.contains('=') && a.matches('{CREDENTIAL_FLAG}') && !a.matches('{NOT_A_CREDENTIAL_FLAG}'))",
        CREDENTIAL_FLAG_MESSAGE,
    ),
    # a token as an item, or after '=', in a few rules (ACCESS_KEY_SHAPED_PARTS: the cost budget of one rule)
    *(
        cel(
            f"!self.exists(a, a.matches('{cel_regex(part)}'))",
            "an item looks like an access token (a shape gitleaks or detect-secrets knows, hf_, ghp_, sk-, a JWT, 40 hex digits, ...): a secret on the command line is "
            "stored in etcd and shown by Ray; put it in a Secret (spec.tracking.wandb.apiKeySecretRef / spec.dataPrep.hfTokenSecretRef)",
        )
        for part in ACCESS_KEY_SHAPED_PARTS
    ),
    *[
        cel(
            f"self.indexOf('{f}') < 0 || (self.indexOf('{f}') + 1 < size(self) && self[self.indexOf('{f}') + 1].matches('{_SIZE_VALUE}'))",
            f"{f} needs a positive integer as the next item",
        )
        for f in MODEL_PARALLEL_FLAGS
    ],
    cel(
        "!self.exists(a, " + " || ".join(f"a.startsWith('{f}=')" for f in MODEL_PARALLEL_FLAGS) + ")",
        'give a model-parallel size as two items ("--tensor-model-parallel-size", "2"), not with \'=\'',
    ),
]

MODEL_PARALLEL_RULES: list[JsonValue] = [
    cel(
        f"{_GPUS} % ({_MODEL_PARALLEL}) == 0",
        "the job's GPUs (hardware.nodes x hardware.gpusPerNode) cannot be split into model-parallel groups "
        "of tensor x pipeline x context parallel size (from extraArgs)",
        field_path=".hardware",
    ),
    cel(
        f"{_GPUS} % ({_MODEL_PARALLEL}) != 0 || self.rollout.globalBatchSize % ({_GPUS} / ({_MODEL_PARALLEL})) == 0",
        "rollout.globalBatchSize must be divisible by the data-parallel size (hardware.nodes x hardware.gpusPerNode "
        "/ model parallel size); Megatron would refuse it at start-up",
        field_path=".rollout.globalBatchSize",
    ),
]


class LoraRLJobSpec(ApiModel):
    """What to train. Only model and hardware are required; everything else defaults to the
    validated Qwen3-4B GRPO LoRA recipe."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": SPEC_RULES + MODEL_PARALLEL_RULES + _immutable_rules()})

    model: ModelSpec = Field(..., description="Base model.")
    hardware: HardwareSpec = Field(..., description="Accelerators, node count and placement.")
    lora: LoraSpec = Field(default_factory=LoraSpec, description="LoRA adapter settings.")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="Rollout generation and rewards.")
    eval: EvalSpec = Field(default_factory=EvalSpec, description="Periodic evaluation.")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="Optimizer.")
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec, description="GRPO coefficients.")
    sglang: SGLangSpec = Field(default_factory=SGLangSpec, description="SGLang rollout engine.")
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec, description="Checkpoints, resume and storage.")
    tracking: TrackingSpec = Field(default_factory=TrackingSpec, description="Experiment tracking.")
    data_prep: DataPrepSpec = Field(default_factory=DataPrepSpec, description="Model and dataset download.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Image, deadlines, retries, cleanup.")
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec, description="Priority, Kueue queue, ServiceAccount.")
    health: HealthSpec = Field(default_factory=HealthSpec, description="Training-health thresholds.")
    export: ExportSpec | None = Field(
        None, description="Export the trained adapter when the run succeeded; mutable (adding it to a finished job exports then)."
    )
    serve: ServeSpec | None = Field(
        None, description="Load the exported adapter into a running SGLang server once exported; needs spec.export. Mutable like spec.export."
    )
    suspend: bool = Field(False, description="Suspend the run: the RayJob is suspended (its RayCluster deleted) and resumed when set back to false.")
    ttl_seconds_after_finished: int | None = Field(
        None,
        ge=0,
        le=2147483647,
        description="Delete this LoraRLJob (and with it its children) this many seconds after it finished (Succeeded or Failed), as a Job's ttlSecondsAfterFinished; unset: kept until deleted.",
    )
    extra_args: list[ExtraArg] | None = Field(
        None,
        max_length=256,
        description="Extra train.py arguments appended after the recipe's, one token per item "
        f'(e.g. ["--tensor-model-parallel-size", "2"]); each item may hold only {SHELL_SAFE_HELP}. '
        "Credential flags and flags the spec sets are refused.",
        json_schema_extra=EXTRA_ARG_ITEM_SCHEMA,
    )


# -------------------------------------------------------------------------------------- status


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    """A Kubernetes-convention condition."""

    type: str = Field(..., max_length=316, description="Condition type, e.g. Ready.")
    status: ConditionStatus = Field(..., description="True, False or Unknown.")
    reason: str = Field(..., max_length=1024, description="CamelCase reason.")
    message: str = Field("", max_length=32768, description="Human-readable detail.")
    last_transition_time: str = Field(..., description="When status last changed (RFC 3339).", json_schema_extra={"format": "date-time"})
    observed_generation: int | None = Field(None, description="The .metadata.generation the condition was set for.")


class RayJobMirror(ApiModel):
    """What the child RayJob reports (written by the operator)."""

    name: str | None = Field(None, description="RayJob name.")
    ray_cluster_name: str | None = Field(None, description="Current RayCluster.")
    dashboard_url: str | None = Field(None, alias="dashboardURL", description="Ray dashboard address.")
    job_id: str | None = Field(None, description="Ray job submission id.")
    job_status: str | None = Field(None, description="Ray job status (PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED).")
    job_deployment_status: str | None = Field(
        None, description="KubeRay deployment status (Initializing, Running, Complete, Failed, Suspending, Suspended, Retrying, Waiting, ValidationFailed)."
    )
    reason: str | None = Field(None, description="KubeRay failure reason.")
    message: str | None = Field(None, description="KubeRay message.")
    succeeded: int | None = Field(None, description="Succeeded attempts.")
    failed: int | None = Field(None, description="Failed attempts.")


class Progress(ApiModel):
    """Training progress (written by the in-job reporter; gpuHours by the operator)."""

    rollout: int = Field(0, description="Rollouts completed.")
    total: int = Field(0, description="Rollouts planned (spec.rollout.numRollouts).")
    percent: int = Field(0, ge=0, le=100, description="rollout / total in percent.")
    eta_seconds: int | None = Field(None, description="Estimated seconds to finish at the observed pace.")
    last_update_time: str | None = Field(None, max_length=64, description="When the reporter last saw progress.", json_schema_extra={"format": "date-time"})
    attempts: int | None = Field(None, description="Attempts so far, this one included (a retry or a re-created RayJob starts a new one).")
    trained_rollouts: int | None = Field(
        None,
        description="Rollouts trained in all attempts, including those trained again after a retry because they ran after the newest checkpoint (never decreases).",
    )
    gpu_hours: float | None = Field(
        None,
        ge=0,
        description="GPU-hours the job's pods held, every attempt included: per pod, its GPU request x the time from its "
        "scheduling to the release of its GPUs (written by the operator from the pods, never by the reporter; docs/observability.md).",
    )


# The watched metrics that can go non-finite: status keys (the reporter's names), never the
# trainer's own text, so the operator's message names a key it knows (control/health.py).
NonFiniteKey = Literal["rawReward", "loss", "trainRolloutLogprobAbsDiff"]


class NonFiniteMetric(ApiModel):
    """A watched metric that was NaN or infinite in the latest rollouts (written by the in-job reporter)."""

    metric: NonFiniteKey = Field(..., description="rawReward (rollout/raw_reward), loss (train/loss) or trainRolloutLogprobAbsDiff.")
    value: Literal["NaN", "Inf", "-Inf"] = Field(..., description="What it was, the latest time.")
    since: int = Field(..., ge=0, le=1_000_000_000, description="The first rollout of the streak (counted across attempts).")
    rollout: int = Field(..., ge=0, le=1_000_000_000, description="The latest rollout it was non-finite at.")
    streak: int = Field(..., ge=1, le=1_000_000_000, description="Rollouts in a row it was non-finite, the latest included (a finite value clears the entry).")


class TrainingMetrics(ApiModel):
    """Latest training metrics (written by the in-job reporter)."""

    step: int | None = Field(None, description="Latest optimizer step.")
    raw_reward: float | None = Field(None, description="rollout/raw_reward of the latest rollout.")
    train_rollout_logprob_abs_diff: float | None = Field(None, description="Latest train/train_rollout_logprob_abs_diff.")
    train_rollout_logprob_abs_diff_mean: float | None = Field(None, description="Mean train/train_rollout_logprob_abs_diff over all steps (health signal).")
    kl: float | None = Field(None, description="train/ppo_kl.")
    loss: float | None = Field(None, description="train/loss.")
    response_length_mean: float | None = Field(None, description="rollout/response_len/mean.")
    truncated_ratio: float | None = Field(None, description="rollout/truncated_ratio.")
    non_finite: list[NonFiniteMetric] | None = Field(
        None,
        max_length=3,
        description="Watched metrics that were NaN or infinite in the latest rollouts (their value fields above keep the last finite one); "
        "TrainingHealthy turns False (NonFiniteMetric) after 3 rollouts in a row (docs/troubleshooting.md).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["metric"]},
    )


class EvalScore(ApiModel):
    """Scores of one eval set."""

    name: str = Field(..., max_length=32, pattern=IDENTIFIER, description="Eval set name, as spec.eval.datasets names it (the job-status policy checks).")
    latest: float = Field(..., description="Latest score.")
    latest_rollout: int = Field(..., description="Rollout of the latest score.")
    best: float = Field(..., description="Best score so far.")
    best_rollout: int = Field(..., description="Rollout of the best score.")


class CheckpointStatus(ApiModel):
    """Saved checkpoints (written by the in-job reporter)."""

    latest_iteration: int | None = Field(None, description="Iteration (rollout id, counted across attempts) of the newest complete checkpoint.")
    latest_path: str | None = Field(
        None,
        max_length=1024,
        pattern=r"^/[A-Za-z0-9_@%+=:,./-]*$",
        description="Its adapter directory on the job volume (what --lora-adapter-path loads), under the job's save directory "
        "/root/shared_data/<job>/checkpoints/ (the job-status policy checks).",
    )
    count: int | None = Field(None, description="Checkpoints saved.")
    saving: int | None = Field(None, description="Iteration of a save being written right now (not yet loadable).")


class AdapterEval(ApiModel):
    """One eval set's score at the exported rollout."""

    name: str = Field(..., max_length=253, description="Eval set name.")
    score: float = Field(..., description="Its latest score at or before the exported rollout.")
    rollout: int = Field(..., description="The rollout of that score.")


class AdapterStatus(ApiModel):
    """The exported adapter (written by the operator from the export pod's report)."""

    uri: str | None = Field(None, max_length=1024, description="Where it is (the first destination): the directory holding lorarl-adapter.json.")
    uris: list[Annotated[str, StringConstraints(max_length=1024)]] | None = Field(None, max_length=4, description="Every destination's URI.")
    digest: str | None = Field(None, max_length=71, description="sha256:<hex> of the manifest lorarl-adapter.json, which holds every file's sha256.")
    format: str | None = Field(None, max_length=64, description="peft-safetensors: adapter_model.safetensors + adapter_config.json.")
    size: int | None = Field(None, description="Bytes of all files.")
    base_model: str | None = Field(None, max_length=96, description="base_model_name_or_path.")
    base_model_revision: str | None = Field(None, max_length=64, description="The base model's revision, if the spec pinned one.")
    rollout: int | None = Field(None, description="The rollout of the exported save (counted across attempts).")
    raw_reward: float | None = Field(None, description="rollout/raw_reward at that rollout.")
    eval: list[AdapterEval] | None = Field(
        None,
        max_length=64,
        description="Eval scores at that rollout.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    export_time: str | None = Field(None, description="When it was exported.", json_schema_extra={"format": "date-time"})


class ServingStatus(ApiModel):
    """Where the adapter is served (written by the operator from the load pod's report)."""

    server: str | None = Field(None, max_length=253, description="The server's URL (spec.serve.url).")
    name: str | None = Field(None, max_length=128, description="The lora_name it is served under.")
    path: str | None = Field(None, max_length=1024, description="The adapter directory the server loaded.")
    load_time: str | None = Field(None, description="When the server loaded it.", json_schema_extra={"format": "date-time"})


class TrackingStatus(ApiModel):
    """Where to follow the run (written by the in-job reporter)."""

    wandb_run_url: str | None = Field(
        None, alias="wandbRunURL", max_length=512, pattern=r"^https://[^\s]+$", description="The W&B run page, as the trainer printed it (https:// only)."
    )


Point = Annotated[list[float], Field(min_length=2, max_length=2)]
Curve = Annotated[list[Point], Field(max_length=128, description="[rollout, value] points, oldest first.")]


class EvalCurve(ApiModel):
    """The scores of one eval set over rollouts."""

    name: str = Field(..., max_length=32, pattern=IDENTIFIER, description="Eval set name, as spec.eval.datasets names it (the job-status policy checks).")
    points: Curve = Field(default_factory=list, description="[rollout, score] points, oldest first.")


class History(ApiModel):
    """Decimated curves over rollouts (written by the in-job reporter; at most 100 points each,
    on a power-of-two grid of rollouts, plus the newest point: docs/observability.md)."""

    reward: Curve | None = Field(None, description="[rollout, rollout/raw_reward] points.")
    logprob_abs_diff: Curve | None = Field(None, description="[rollout, train/train_rollout_logprob_abs_diff] points (the last step of each rollout).")
    eval: list[EvalCurve] | None = Field(
        None,
        max_length=16,
        description="Per eval set: [rollout, score] points (at most one per spec.eval.datasets).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class GpuPod(ApiModel):
    """One pod's GPU-hours so far (written by the operator)."""

    name: str = Field(..., max_length=253, description="Pod name.")
    uid: str = Field(..., max_length=64, description="Pod uid.")
    gpus: int = Field(..., ge=0, le=1024, description="The pod's effective GPU request.")
    hours: float = Field(..., ge=0, description="GPUs x hours from its scheduling to its release (or to now).")
    holding: bool = Field(..., description="The pod holds its GPUs still.")


class GpuAccounting(ApiModel):
    """How progress.gpuHours is counted (written by the operator): the pods gone, and each pod
    present, so that the total survives the pods of earlier attempts and operator restarts."""

    settled_hours: float = Field(0.0, ge=0, description="GPU-hours of the job's pods that are gone.")
    pods: list[GpuPod] = Field(
        default_factory=list,
        max_length=256,
        description="The job's present pods that were scheduled with GPUs.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"]},
    )


Phase = Literal["Pending", "Preparing", "Running", "Succeeded", "Failed", "Suspended"]


class LoraRLJobStatus(ApiModel):
    """Observed state. The operator writes phase, conditions, observedGeneration, rayJob, times,
    gpuAccounting and progress.gpuHours; the in-job reporter writes the rest of progress, metrics,
    eval, checkpoints, tracking and history (disjoint fields)."""

    phase: Phase | None = Field(None, description="Pending, Preparing, Running, Succeeded, Failed or Suspended.")
    observed_generation: int | None = Field(None, description="The .metadata.generation last reconciled.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Reconciling, Stalled, Succeeded, Failed, Suspended, TrainingHealthy; Admitted for jobs queued in Kueue; AdapterExported with spec.export; AdapterServed with spec.serve.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    ray_job: RayJobMirror | None = Field(None, description="Mirror of the child RayJob's status.")
    start_time: str | None = Field(None, description="When the RayJob started running.", json_schema_extra={"format": "date-time"})
    completion_time: str | None = Field(None, description="When the run finished.", json_schema_extra={"format": "date-time"})
    gpu_accounting: GpuAccounting | None = Field(None, description="The pods behind progress.gpuHours.")
    progress: Progress | None = Field(None, description="Rollout N of M, percent, ETA.")
    metrics: TrainingMetrics | None = Field(None, description="Latest training metrics.")
    eval: list[EvalScore] | None = Field(
        None,
        max_length=16,
        description="Latest and best score per eval set (at most one per spec.eval.datasets, named as there).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    checkpoints: CheckpointStatus | None = Field(None, description="Latest checkpoint.")
    tracking: TrackingStatus | None = Field(None, description="Experiment tracking links.")
    history: History | None = Field(None, description="Curves of reward, logprob gap and eval scores over rollouts (what lorarl plot draws).")
    adapter: AdapterStatus | None = Field(None, description="The exported adapter (spec.export): where, its digest, the rollout and scores it was taken at.")
    serving: ServingStatus | None = Field(None, description="Where the exported adapter is served (spec.serve): the server, the name, the path it loaded.")


# ------------------------------------------------------------ status as the operator writes it
# The operator's fields of status as the dicts it sends, keys as on the wire (the models' aliases),
# a field absent rather than null (null deletes in a merge patch). Typed for the checker and free
# at run time: every reconcile builds them, and a pydantic instance per condition made a resync of
# a running job ~40% dearer in CPU (docs/architecture.md, "Typing"). Each mirrors the model above
# that the CRD is generated from; tests/api/test_status_dicts.py fails when they differ.


class ConditionDict(TypedDict):
    """``Condition`` as written (the operator always sets observedGeneration)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int


class RayJobMirrorDict(TypedDict, total=False):
    """``RayJobMirror`` as written: KubeRay's values, those it left empty absent."""

    name: str
    rayClusterName: str
    dashboardURL: str
    jobId: str
    jobStatus: str
    jobDeploymentStatus: str
    reason: str
    message: str
    succeeded: int
    failed: int


class OperatorStatusDict(TypedDict, total=False):
    """The fields of ``LoraRLJobStatus`` the status mapping writes (control/status.py ``compute``;
    gpuAccounting and progress.gpuHours are added by the reconcile, control/gpuhours.py). adapter
    and serving are the export and load pods' reports, validated against ``AdapterStatus`` and
    ``ServingStatus`` where they are read (control/adapter_status.py, serve_status.py)."""

    phase: Required[Phase]
    observedGeneration: Required[int]
    conditions: Required[list[ConditionDict]]
    rayJob: RayJobMirrorDict
    startTime: str
    completionTime: str
    adapter: dict[str, Any]
    serving: dict[str, Any]


class ObjectMeta(BaseModel):
    """The parts of metadata the renderer reads."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(..., max_length=MAX_NAME_LENGTH, pattern=DNS1035_LABEL)
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class LoraRLJob(BaseModel):
    """A LoRA RL post-training run (miles GRPO on KubeRay)."""

    model_config = ConfigDict(extra="allow")

    api_version: Literal["lorarl.dev/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["LoraRLJob"] = KIND
    metadata: ObjectMeta
    spec: LoraRLJobSpec
    # Status is written by the operator and the reporter; reading a spec must never fail on it.
    status: dict[str, Any] | None = None
