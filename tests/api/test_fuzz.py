"""Property tests: every valid spec renders, the RayJob fits KubeRay's own CRD schema, and no
string can change the meaning of the training command: the rendered entrypoint is run through
the real quoting chain (tests/api/quoting_chain.py: KubeRay's submitter bash, Ray's joiner, the
head's shell) and the argv the trainer receives must be exactly what the spec says.

``LORARL_FUZZ_EXAMPLES`` (default 500) sets the examples per property (whole specs: a fifth of
it here, all of it in tests/api/test_fuzz_live.py); the hypothesis profile (tests/conftest.py) is
derandomized in CI."""

from __future__ import annotations

import copy
import urllib.parse

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from lorarl.admission.validation import validate
from lorarl.job import command, render

from tests.api.quoting_chain import Chain, every_variant
from tests.api.strategies import FUZZ_EXAMPLES, expected_words, flag_value, trainer_and_reporter_read, valid_specs
from tests.helpers import seed_doc
from tests.kuberay_schema import rayjob_errors

FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Whole specs: tests/api/test_fuzz_live.py runs FUZZ_EXAMPLES of them through the same checks plus
# the real API server; this offline run (for `-m "not controlplane"`) takes a fifth of that.
FUZZ_SPECS = settings(FUZZ, max_examples=max(100, FUZZ_EXAMPLES // 5))


@pytest.fixture(scope="module")
def chain():
    with Chain() as c:
        yield c


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
    train = received[received.index("--") + 1 :]
    for flag, value in expected_words(doc["spec"]).items():
        assert flag_value(train, flag) == value, flag
    assert ("--eval-interval" in train) == ("interval" in doc["spec"]["eval"])
    if doc["spec"]["extraArgs"]:
        assert train[-len(doc["spec"]["extraArgs"]) :] == doc["spec"]["extraArgs"]
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
    "spec.model.name": (
        lambda s, v: s.update(model={"name": v, "architecture": {"preset": "qwen3-4B"}}),
        "--hf-checkpoint",
        lambda v: f"/root/models/{v}/main",
    ),
    "spec.model.revision": (_set(["model", "revision"]), "--hf-checkpoint", lambda v: "/root/models/Qwen/Qwen3-4B/" + revision_segment(v)),
    "spec.lora.targetModules[0]": (lambda s, v: s.update(lora={"targetModules": [v]}), "--target-modules", str),
    "spec.rollout.inputKey": (_set(["rollout", "inputKey"]), "--input-key", str),
    "spec.rollout.labelKey": (_set(["rollout", "labelKey"]), "--label-key", str),
    "spec.rollout.rewardType": (_set(["rollout", "rewardType"]), "--rm-type", str),
    "spec.rollout.promptData.repo": (
        lambda s, v: s.update(rollout={"promptData": {"repo": v}}),
        "--prompt-data",
        lambda v: f"/root/datasets/{v}/main/{v.rsplit('/', 1)[-1]}.jsonl",
    ),
    "spec.rollout.promptData.file": (
        lambda s, v: s.update(rollout={"promptData": {"repo": "a/b", "file": v}}),
        "--prompt-data",
        lambda v: f"/root/datasets/a/b/main/{v}",
    ),
    "spec.rollout.promptData.revision": (
        lambda s, v: s.update(rollout={"promptData": {"repo": "a/b", "revision": v}}),
        "--prompt-data",
        lambda v: f"/root/datasets/a/b/{revision_segment(v)}/b.jsonl",
    ),
    "spec.eval.datasets[0].name": (lambda s, v: s.update(eval={"datasets": [{"name": v, "repo": "a/b"}]}), "--eval-prompt-data", str),
    "spec.eval.datasets[0].file": (
        lambda s, v: s.update(eval={"datasets": [{"name": "n", "repo": "a/b", "file": v}]}),
        "n",
        lambda v: f"/root/datasets/a/b/main/{v}",
    ),
    "spec.tracking.wandb.project": (
        lambda s, v: s.update(tracking={"wandb": {"project": v, "apiKeySecretRef": {"name": "w", "key": "k"}}}),
        "--wandb-project",
        str,
    ),
    "spec.tracking.wandb.team": (lambda s, v: s.update(tracking={"wandb": {"team": v, "apiKeySecretRef": {"name": "w", "key": "k"}}}), "--wandb-team", str),
    "spec.tracking.wandb.group": (lambda s, v: s.update(tracking={"wandb": {"group": v, "apiKeySecretRef": {"name": "w", "key": "k"}}}), "--wandb-group", str),
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
METACHARACTERS = [
    "a b",
    "x;rm -rf /",
    "$(id)",
    "`id`",
    "a'b",
    'a"b',
    "a\nb",
    "${HOME}",
    "a|b",
    "a&&b",
    "*",
    "~",
    "a\\b",
    "--x=$y",
    "#c",
    ">f",
    "a\tb",
    "{a,b}",
    "\n",
    "a\rb",
    "\x00",
    "'",
    '"',
    "../../etc/passwd",
    "..",
    "a/../../b",
    "/etc/passwd",
    "--wandb-key=abc123",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
]
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
    train = received[received.index("--") + 1 :]
    if flag is None:
        assert train[-1] == value
    else:
        assert flag_value(train, flag) == shown(value), (field, value)


def assert_the_trainer_reads(received, flag, expected):
    """The pod's real parsers read the command, and the flag's value is the spec's word (not an
    option, not swallowed by one)."""
    namespace, _ = trainer_and_reporter_read(received)
    dest = "eval_prompt_data" if flag == "n" else flag.lstrip("-").replace("-", "_")
    parsed = getattr(namespace, dest)
    assert expected == parsed or (isinstance(parsed, list) and expected in parsed), (flag, expected, parsed)


# Words that parse as options wherever they stand as a word of their own (argparse, click)
OPTION_LIKE = ["--help", "-h", "-x", "--", "-1", "--lr=1"]


@pytest.mark.parametrize("value", OPTION_LIKE)
@pytest.mark.parametrize("field", sorted(f for f in STRING_FIELDS if not f.startswith("spec.extraArgs")))
def test_no_spec_string_parses_as_an_option(chain, field, value):
    """Issue 24: a spec string that reaches a command line either is refused, naming its field,
    or reaches the pod's parsers as a value (inside a path, after its flag), never as an option."""
    setter, flag, shown = STRING_FIELDS[field]
    doc = seed_doc()
    setter(doc["spec"], value)
    job, problems = validate(copy.deepcopy(doc))
    if problems:
        assert field in {p.field for p in problems}, problems
        return
    received = chain.run(command.entrypoint(job)).argv
    assert_the_trainer_reads(received, flag, shown(value))


def test_known_metacharacters_are_rejected_with_field_names():
    doc = seed_doc()
    doc["spec"]["extraArgs"] = ["--foo", "$(reboot)"]
    _, problems = validate(doc)
    # the list is named: a rule on the item would quote the item in the API server's answer
    assert [p.field for p in problems] == ["spec.extraArgs"]


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
