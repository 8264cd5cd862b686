"""Property tests: every valid spec renders, the RayJob fits KubeRay's own CRD schema, and no
string can change the meaning of the training command: the rendered entrypoint is run through
the real quoting chain (tests/api/quoting_chain.py: KubeRay's submitter bash, Ray's joiner, the
head's shell) and the argv the trainer receives must be exactly what the spec says.

``LORARL_FUZZ_EXAMPLES`` (default 500) sets the examples per property (whole specs: a fifth of
it here, all of it in tests/api/test_fuzz_live.py); the hypothesis profile (tests/conftest.py) is
derandomized in CI."""

from __future__ import annotations

import copy
import os
import urllib.parse

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from lorarl.admission.validation import validate
from lorarl.api import types as api
from lorarl.job import command, render

from tests.api.quoting_chain import Chain, every_variant
from tests.helpers import seed_doc
from tests.kuberay_schema import rayjob_errors

FUZZ_EXAMPLES = int(os.environ.get("LORARL_FUZZ_EXAMPLES", "500"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Whole specs: tests/api/test_fuzz_live.py runs FUZZ_EXAMPLES of them through the same checks plus
# the real API server; this offline run (for `-m "not controlplane"`) takes a fifth of that.
FUZZ_SPECS = settings(FUZZ, max_examples=max(100, FUZZ_EXAMPLES // 5))


@pytest.fixture(scope="module")
def chain():
    with Chain() as c:
        yield c


identifier = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,20}\Z")
repo_id = st.builds(lambda a, b: f"{a}/{b}", identifier, identifier)
profiles = st.sampled_from([p.value for p in api.AcceleratorProfile])
qwen_sizes = st.sampled_from(["0.6B", "1.7B", "4B", "8B", "14B", "32B"])


dns_label = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?\Z")
dns_subdomain = st.builds(lambda parts: ".".join(parts), st.lists(dns_label, min_size=1, max_size=3))
label_value = st.from_regex(r"\A(([A-Za-z0-9][-A-Za-z0-9_.]{0,10})?[A-Za-z0-9])?\Z")
label_key = st.builds(lambda prefix, name: f"{prefix}/{name}" if prefix else name,
                      st.one_of(st.none(), dns_subdomain), st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z"))
# Kubernetes quantity forms (apimachinery resource.ParseQuantity): integers, decimals ("1.", ".5"),
# a leading "+", binary and decimal SI suffixes, exponents ("1e3", "5E2"); positive values.
quantity = st.one_of(
    st.from_regex(r"\A\+?[1-9][0-9]{0,3}(\.[0-9]{0,2})?(m|k|Ki|Mi|Gi|Ti|M|G|T)?\Z"),
    st.from_regex(r"\A\+?\.[1-9]{1,2}(Gi|G)?\Z"),
    st.from_regex(r"\A[1-9][0-9]?[eE][0-9]\Z"),
)
tolerations = st.lists(st.one_of(
    st.builds(lambda k, e: {"key": k, "operator": "Exists", **({"effect": e} if e else {})}, label_key, st.sampled_from([None, "NoSchedule", "PreferNoSchedule"])),
    st.builds(lambda k, v: {"key": k, "operator": "Equal", "value": v, "effect": "NoSchedule"}, label_key, label_value),
    st.builds(lambda k, s: {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s}, label_key, st.integers(0, 86400)),
    st.just({"operator": "Exists"}),
), max_size=3)
match_expression = st.builds(lambda k, op, vs: {"key": k, "operator": op, **({"values": vs} if op in ("In", "NotIn") else {})},
                             label_key, st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]), st.lists(label_value, min_size=1, max_size=3))
affinity = st.one_of(
    st.builds(lambda exprs: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}},
              st.lists(match_expression, min_size=1, max_size=3)),
    st.builds(lambda w, exprs: {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": w, "preference": {"matchExpressions": exprs}}]}},
              st.integers(1, 100), st.lists(match_expression, max_size=2)),
    st.builds(lambda key, labels: {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": key, "labelSelector": {"matchLabels": labels}}]}},
              label_key, st.dictionaries(label_key, label_value, max_size=2)),
)
data_prep = st.fixed_dictionaries({}, optional={
    "hfTokenSecretRef": st.builds(lambda n: {"name": n, "key": "token"}, dns_label),
    "endpoint": st.sampled_from(["https://hf-mirror.com", "http://10.0.0.1:8080/hf"]),
    "image": st.sampled_from(["python:3.12-slim", "registry.example.com/team/hf-dl:1.0", "busybox@sha256:0123abcd"]),
    "skip": st.booleans(),
})


def pass_through(accelerator):
    amd = accelerator.startswith("MI")
    return st.fixed_dictionaries({}, optional={
        "nodeSelector": st.dictionaries(label_key, label_value, max_size=3),
        "tolerations": tolerations,
        "affinity": affinity,
        "resourceName": st.sampled_from(["amd.com/gpu", "amd.com/cpx_nps4"] if amd else ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]),
        "cpu": quantity,
        "memory": quantity,
        "shmSize": quantity,
        "profileNodeSelector": st.booleans(),
    })


@st.composite
def valid_specs(draw):
    accelerator = draw(profiles)
    nodes = draw(st.integers(1, 4))
    gpn = draw(st.sampled_from([None, 1, 2, 4, 8]))
    gpus = nodes * (gpn or 8)
    samples = draw(st.sampled_from([2, 4, 8, 16]))
    m, j = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    gbs = gpus * m * samples
    batch = gpus * m * j
    engine = draw(st.sampled_from([e for e in (1, 2, 4, 8) if (gpn or 8) % e == 0]))
    spec = {
        "model": {"name": f"Qwen/Qwen3-{draw(qwen_sizes)}"},
        "hardware": {"accelerator": accelerator, "nodes": nodes},
        "lora": {
            "rank": draw(st.integers(1, 256)),
            "alpha": draw(st.integers(1, 512)),
            "dropout": draw(st.floats(0, 0.9)),
            "targetModules": draw(st.lists(identifier, min_size=1, max_size=4)),
            "baseCpuBackup": draw(st.booleans()),
        },
        "rollout": {
            "promptData": {"repo": draw(repo_id)},
            "inputKey": draw(identifier),
            "numRollouts": draw(st.integers(1, 5000)),
            "batchSize": batch,
            "samplesPerPrompt": samples,
            "globalBatchSize": gbs,
            "temperature": draw(st.floats(0, 2)),
            "shuffle": draw(st.booleans()),
        },
        "eval": draw(
            st.one_of(
                st.just({"enabled": False}),
                st.builds(
                    lambda names, repo, interval: {
                        "interval": interval,
                        "datasets": [{"name": n, "repo": repo} for n in names],
                        "topP": 0.95,
                    },
                    st.lists(identifier, min_size=1, max_size=3, unique=True),
                    repo_id,
                    st.integers(1, 5),
                ),
            )
        ),
        "optimizer": {"lr": draw(st.floats(1e-7, 1e-2)), "lrDecayStyle": draw(st.sampled_from(["constant", "cosine"]))},
        "algorithm": {"epsClip": 0.2, "epsClipHigh": draw(st.floats(0.2, 1.0))},
        "sglang": {"gpusPerEngine": engine, "memFractionStatic": draw(st.floats(0.05, 0.95))},
        "checkpoint": {"saveInterval": draw(st.integers(1, 100)), "resume": draw(st.booleans())},
        "runPolicy": {"backoffLimit": draw(st.integers(0, 5)), "ttlSecondsAfterFinished": draw(st.integers(0, 86400))},
        "suspend": draw(st.booleans()),
    }
    if gpn:
        spec["hardware"]["gpusPerNode"] = gpn
    spec["hardware"].update(draw(pass_through(accelerator)))
    if "interval" in spec["eval"]:
        spec["eval"]["interval"] = min(spec["eval"]["interval"], spec["rollout"]["numRollouts"])
    if draw(st.booleans()):
        spec["checkpoint"]["storage"] = {"existingClaim": draw(dns_subdomain)}
    elif nodes > 1:
        spec["checkpoint"]["storage"] = {"accessModes": ["ReadWriteMany"]}
    if draw(st.booleans()):
        spec["dataPrep"] = draw(data_prep)
    if draw(st.booleans()):
        spec["tracking"] = {"wandb": {"project": draw(identifier), "apiKeySecretRef": {"name": "wandb", "key": "k"}}}
    if draw(st.booleans()):
        spec["scheduling"] = {"queueName": "q"}
    spec["extraArgs"] = draw(st.lists(st.from_regex(r"\A--[a-z][a-z0-9-]{0,20}\Z"), max_size=3).filter(
        lambda xs: not set(xs) & {"--wandb-key", "--hf-token", "--tensor-model-parallel-size"}))
    name = draw(st.from_regex(r"\A[a-z][a-z0-9-]{0,45}[a-z0-9]\Z"))
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name, "namespace": "ns", "uid": "u-1"}, "spec": spec}


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def expected_words(spec: dict) -> dict[str, str]:
    """Flag -> value, read from the spec document itself (not from lorarl.job.command)."""
    out = {
        "--input-key": spec["rollout"]["inputKey"],
        "--num-rollout": str(spec["rollout"]["numRollouts"]),
        "--rollout-batch-size": str(spec["rollout"]["batchSize"]),
        "--n-samples-per-prompt": str(spec["rollout"]["samplesPerPrompt"]),
        "--global-batch-size": str(spec["rollout"]["globalBatchSize"]),
        "--lora-rank": str(spec["lora"]["rank"]),
        "--lora-alpha": str(spec["lora"]["alpha"]),
        "--target-modules": ",".join(spec["lora"]["targetModules"]),
        "--save-interval": str(spec["checkpoint"]["saveInterval"]),
        "--actor-num-nodes": str(spec["hardware"]["nodes"]),
        "--rollout-num-gpus-per-engine": str(spec["sglang"]["gpusPerEngine"]),
        "--lr-decay-style": spec["optimizer"]["lrDecayStyle"],
    }
    if "interval" in spec["eval"]:
        out["--eval-interval"] = str(spec["eval"]["interval"])
    if "gpusPerNode" in spec["hardware"]:
        out["--actor-num-gpus-per-node"] = str(spec["hardware"]["gpusPerNode"])
    if "tracking" in spec:
        out["--wandb-project"] = spec["tracking"]["wandb"]["project"]
    return out


@FUZZ_SPECS
@given(valid_specs(), st.sampled_from(every_variant()))
def test_every_valid_spec_renders_and_the_trainer_gets_what_the_spec_says(chain, doc, variant):
    job, problems = validate(copy.deepcopy(doc))
    if problems:  # only extra args that collide with spec-owned flags may be reported
        assert all(p.field.startswith("spec.extraArgs") for p in problems), problems
        event("refused: extraArgs collide with a spec-owned flag")
        return
    children = render.render(job)
    rayjob = children[-1]
    assert rayjob["kind"] == "RayJob"
    assert rayjob_errors(rayjob) == []
    # the real chain: what python3 on the head receives is the rendered argv, word for word ...
    received = chain.run(rayjob["spec"]["entrypoint"], joiner=variant[0], head_shell=variant[1]).argv
    assert received == command.entrypoint_argv(job)[1:]
    # ... and says what the spec says
    train = received[received.index("--") + 1:]
    for flag, value in expected_words(doc["spec"]).items():
        assert flag_value(train, flag) == value, flag
    assert ("--eval-interval" in train) == ("interval" in doc["spec"]["eval"])
    if doc["spec"]["extraArgs"]:
        assert train[-len(doc["spec"]["extraArgs"]):] == doc["spec"]["extraArgs"]
    assert children == render.render(job)  # deterministic
    assert len({(c["kind"], c["metadata"]["name"]) for c in children}) == len(children)
    event(f"accepted, eval interval {doc['spec']['eval'].get('interval', 'off')}")


# Every user string that can reach the command: (path the API names, how to set it, the flag
# whose value must then be exactly it, how the value appears there).
def revision_segment(revision):
    """The documented directory name of a revision: percent-encoded into one path segment, the
    revisions '.' and '..' with their dots encoded too (never the parent's own directory)."""
    segment = urllib.parse.quote(revision, safe="")
    return segment.replace(".", "%2E") if segment in (".", "..") else segment


def _set(path):
    def setter(spec, value):
        node = spec
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = value
    return setter


STRING_FIELDS = {
    "spec.model.name": (lambda s, v: s.update(model={"name": v, "architecture": {"preset": "qwen3-4B"}}),
                        "--hf-checkpoint", lambda v: f"/root/models/{v}/main"),
    "spec.model.revision": (_set(["model", "revision"]), "--hf-checkpoint",
                            lambda v: "/root/models/Qwen/Qwen3-4B/" + revision_segment(v)),
    "spec.lora.targetModules[0]": (lambda s, v: s.update(lora={"targetModules": [v]}), "--target-modules", str),
    "spec.rollout.inputKey": (_set(["rollout", "inputKey"]), "--input-key", str),
    "spec.rollout.labelKey": (_set(["rollout", "labelKey"]), "--label-key", str),
    "spec.rollout.rewardType": (_set(["rollout", "rewardType"]), "--rm-type", str),
    "spec.rollout.promptData.repo": (lambda s, v: s.update(rollout={"promptData": {"repo": v}}), "--prompt-data",
                                     lambda v: f"/root/datasets/{v}/main/{v.rsplit('/', 1)[-1]}.jsonl"),
    "spec.rollout.promptData.file": (lambda s, v: s.update(rollout={"promptData": {"repo": "a/b", "file": v}}), "--prompt-data",
                                     lambda v: f"/root/datasets/a/b/main/{v}"),
    "spec.rollout.promptData.revision": (lambda s, v: s.update(rollout={"promptData": {"repo": "a/b", "revision": v}}), "--prompt-data",
                                         lambda v: f"/root/datasets/a/b/{revision_segment(v)}/b.jsonl"),
    "spec.eval.datasets[0].name": (lambda s, v: s.update(eval={"datasets": [{"name": v, "repo": "a/b"}]}), "--eval-prompt-data", str),
    "spec.eval.datasets[0].file": (lambda s, v: s.update(eval={"datasets": [{"name": "n", "repo": "a/b", "file": v}]}), "n",
                                   lambda v: f"/root/datasets/a/b/main/{v}"),
    "spec.tracking.wandb.project": (lambda s, v: s.update(tracking={"wandb": {"project": v, "apiKeySecretRef": {"name": "w", "key": "k"}}}),
                                    "--wandb-project", str),
    "spec.tracking.wandb.team": (lambda s, v: s.update(tracking={"wandb": {"team": v, "apiKeySecretRef": {"name": "w", "key": "k"}}}),
                                 "--wandb-team", str),
    "spec.tracking.wandb.group": (lambda s, v: s.update(tracking={"wandb": {"group": v, "apiKeySecretRef": {"name": "w", "key": "k"}}}),
                                  "--wandb-group", str),
    "spec.sglang.loraBackend": (_set(["sglang", "loraBackend"]), "--sglang-lora-backend", str),
    "spec.sglang.attentionBackend": (_set(["sglang", "attentionBackend"]), "--sglang-attention-backend", str),
    "spec.extraArgs[0]": (lambda s, v: s.update(extraArgs=[v]), None, str),
    "spec.extraArgs[1]": (lambda s, v: s.update(extraArgs=["--max-tokens-per-gpu", v]), "--max-tokens-per-gpu", str),
}
# The API server names a rule on a whole list (credential and spec-owned flags in extraArgs) at
# the list, not the item: that path is exact too.
LIST_RULE_PATHS = {"spec.extraArgs[0]": "spec.extraArgs", "spec.extraArgs[1]": "spec.extraArgs"}

LOOKALIKES = [
    "\u2212\u2212lr",  # MINUS SIGN twice, looks like --lr
    "Qwen/Qwen3\u20104B",  # HYPHEN
    "\uff31wen/\uff31wen3-4B",  # FULLWIDTH Q
    "\u0430ll-linear",  # CYRILLIC a
    "prompt\u200b",  # ZERO WIDTH SPACE
    "a\u00a0b",  # NO-BREAK SPACE
    "\u202eprompt",  # RIGHT-TO-LEFT OVERRIDE
    "prompt\ufe52",  # SMALL FULL STOP
    "\u2024\u2024/x",  # ONE DOT LEADER twice, looks like ..
    "deep\u0455caler",  # CYRILLIC s
]
METACHARACTERS = ["a b", "x;rm -rf /", "$(id)", "`id`", "a'b", 'a"b', "a\nb", "${HOME}", "a|b", "a&&b", "*", "~",
                  "a\\b", "--x=$y", "#c", ">f", "a\tb", "{a,b}", "\n", "a\rb", "\x00", "'", "\"", "../../etc/passwd",
                  "..", "a/../../b", "/etc/passwd", "--wandb-key=abc123", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"]
nasty = st.one_of(
    st.text(min_size=1, max_size=40),
    st.sampled_from(METACHARACTERS + LOOKALIKES),
    st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,20}\Z"),  # well-formed: these reach the chain
    st.from_regex(r"\A[A-Za-z0-9]{1,8}/[A-Za-z0-9][A-Za-z0-9_.-]{0,12}\Z"),
    st.from_regex(r"\A[A-Za-z0-9_@%+=:,./-]{1,30}\Z"),
)


@FUZZ
@given(st.sampled_from(sorted(STRING_FIELDS)), nasty, st.sampled_from(every_variant()))
@example("spec.model.revision", ".", ("list2cmdline", "/bin/sh"))  # found by the CI profile
@example("spec.rollout.promptData.revision", "..", ("list2cmdline", "/bin/sh"))
def test_strings_never_change_the_command(chain, field, value, variant):
    setter, flag, shown = STRING_FIELDS[field]
    doc = seed_doc()
    setter(doc["spec"], value)
    job, problems = validate(copy.deepcopy(doc))
    if problems:
        # rejected: a message names exactly the field the user wrote (or the list a list rule guards)
        allowed = {field, LIST_RULE_PATHS.get(field)}
        assert any(p.field in allowed for p in problems), (field, value, problems)
        event(f"{field}: refused")
        return
    event(f"{field}: accepted, run through the chain")
    received = chain.run(command.entrypoint(job), joiner=variant[0], head_shell=variant[1]).argv
    assert received == command.entrypoint_argv(job)[1:], (field, value)
    train = received[received.index("--") + 1:]
    if flag is None:
        assert train[-1] == value
    else:
        assert flag_value(train, flag) == shown(value), (field, value)


def test_known_metacharacters_are_rejected_with_field_names():
    doc = seed_doc()
    doc["spec"]["extraArgs"] = ["--foo", "$(reboot)"]
    _, problems = validate(doc)
    assert [p.field for p in problems] == ["spec.extraArgs[1]"]


@FUZZ
@given(nasty)
def test_revisions_reach_the_downloader_intact_or_are_rejected(value):
    doc = seed_doc()
    doc["spec"]["model"]["revision"] = value
    job, problems = validate(doc)
    if problems:
        assert [p.field for p in problems] == ["spec.model.revision"], problems
        return
    # the revision keys the directory percent-encoded: one path segment, never '.' or '..', that
    # decodes to the revision (tests/prepare); the downloader gets the revision itself
    kind, repo, directory, revision = render.downloads(job)[:4]
    parent, segment = directory.rsplit("/", 1)
    assert (kind, repo, parent, revision) == ("model", "Qwen/Qwen3-4B", "/root/models/Qwen/Qwen3-4B", value)
    assert segment not in ("", ".", "..") and urllib.parse.unquote(segment) == value
