"""The credential screen (a heuristic, docs/security.md "The credential screen"): credential
words anywhere in a flag name, token shapes in every extraArgs value and in the identifier fields
that reach W&B, logs and the status. Judged by the real API server (the CRD's CEL rules) and by
`lorarl validate`, which must agree; the list of miles flags that hold such a word and are not
credentials is checked against the dump of miles' real parser."""

from __future__ import annotations

import copy
import json
import re

import pytest
from lorarl.admission.validation import validate
from lorarl.api import types as api
from lorarl.job import command

from tests.api.apiserver import dry_run_create
from tests.helpers import REPO, seed_doc

MILES_OPTIONS = next((REPO / "hack/images/job/miles/miles_standin").glob("train-py-options-*.json"))
# the flags of miles' parser that do carry a credential (or a key file), refused by the screen
MILES_CREDENTIAL_FLAGS = {
    "--wandb-key",
    "--sglang-api-key",
    "--sglang-admin-api-key",
    "--sglang-ssl-keyfile",
    "--sglang-ssl-keyfile-password",
    "--eval-sglang-api-key",
    "--eval-sglang-admin-api-key",
    "--eval-sglang-ssl-keyfile",
    "--eval-sglang-ssl-keyfile-password",
    "--router-api-key",
    "--router-control-plane-api-keys",
    "--router-oracle-password",
    "--router-client-key-path",
    "--router-tls-key-path",
}
HEX40 = "0123456789abcdef0123456789abcdef01234567"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZW5hbnQifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"

# the bypasses of the old word list (issue 19, finding 8), each refused naming the field
REFUSED = [
    ({"extraArgs": ["--wandbkey", HEX40]}, "spec.extraArgs"),
    ({"extraArgs": ["--accessToken=abc"]}, "spec.extraArgs"),
    ({"extraArgs": ["--hftoken", "x"]}, "spec.extraArgs"),
    ({"extraArgs": ["--pass", "x"]}, "spec.extraArgs"),
    ({"extraArgs": ["--bearer=" + JWT]}, "spec.extraArgs"),
    ({"extraArgs": ["--run-note", HEX40]}, "spec.extraArgs"),
    ({"extraArgs": ["--run-note", JWT]}, "spec.extraArgs"),
    ({"extraArgs": ["--run-note", "local-" + HEX40]}, "spec.extraArgs"),
    ({"extraArgs": ["--run-note", "A" * 86]}, "spec.extraArgs"),  # W&B's longer keys
    ({"extraArgs": ["--oauthclient", "x"]}, "spec.extraArgs"),
    ({"tracking": {"wandb": {"project": HEX40, "apiKeySecretRef": {"name": "wandb", "key": "k"}}}}, "spec.tracking.wandb.project"),
    ({"tracking": {"wandb": {"team": "hf_" + "a" * 34, "apiKeySecretRef": {"name": "wandb", "key": "k"}}}}, "spec.tracking.wandb.team"),
    ({"tracking": {"wandb": {"group": JWT, "apiKeySecretRef": {"name": "wandb", "key": "k"}}}}, "spec.tracking.wandb.group"),
]
# what the screen must leave alone: miles flags with a credential word that are no credential,
# counts, a 39-digit hex value (not a W&B key), words with "pass" inside
ACCEPTED = [
    ["--moe-token-dispatcher-type", "alltoall"],
    ["--rollout-stop-token-ids", "151645"],
    ["--eval-sglang-speculative-token-map", "x.json"],
    ["--sglang-max-total-tokens", "4096"],
    ["--log-passrate"],
    ["--sglang-enable-forward-pass-metrics"],
    ["--run-note", HEX40[:39]],
    ["--tokenizer-type", "HuggingFaceTokenizer"],
]


def with_spec(spec: dict) -> dict:
    doc = seed_doc()
    doc["spec"].update(copy.deepcopy(spec))
    return doc


def miles_flags() -> set[str]:
    actions = json.loads(MILES_OPTIONS.read_text())["actions"]
    return {o for a in actions for o in a["opts"] if o.startswith("--")}


def screened(flag: str) -> bool:
    return bool(re.search(api.CREDENTIAL_FLAG, flag)) and not re.search(api.NOT_A_CREDENTIAL_FLAG, flag)


def test_the_screen_refuses_exactly_the_credential_flags_of_miles():
    flags = miles_flags()
    assert {f for f in flags if screened(f)} == MILES_CREDENTIAL_FLAGS
    # every exception names a real miles flag (no exception for a flag that does not exist)
    for name in api.NOT_A_CREDENTIAL_FLAGS:
        assert f"--{name}" in flags or f"--eval-{name}" in flags, name


@pytest.mark.parametrize(("spec", "field"), REFUSED, ids=[f"{f}:{json.dumps(s)[:40]}" for s, f in REFUSED])
def test_the_api_server_refuses_credentials_and_token_shapes(kube_api, namespace, spec, field):
    doc = with_spec(spec)
    answer = dry_run_create(kube_api, namespace, doc)

    def names(fields):  # a list's elements are named with their index (spec.extraArgs[1])
        return any(f == field or f.startswith(field + "[") for f in fields)

    assert not answer.accepted and names(answer.fields), answer
    _, problems = validate(copy.deepcopy(doc))
    assert names(p.field for p in problems), problems
    # never echoed: a list is named by its type ("array"); a string field refused by a CEL rule by
    # its type too ("Invalid value: \"string\""), where a refused `pattern` would quote the value
    # (the token shapes above all fit the identifier pattern, so only the CEL rule refuses them)
    for value in (HEX40, JWT, "hf_" + "a" * 34, "A" * 86):
        assert value not in answer.message, answer.message
    assert not any(value in p.message for p in problems for value in (HEX40, JWT, "hf_" + "a" * 34, "A" * 86)), problems


@pytest.mark.parametrize("args", ACCEPTED, ids=[" ".join(a)[:40] for a in ACCEPTED])
def test_flags_that_are_no_credential_pass(kube_api, namespace, args):
    doc = with_spec({"extraArgs": args})
    assert dry_run_create(kube_api, namespace, doc).accepted
    job, problems = validate(copy.deepcopy(doc))
    assert not problems, problems
    assert command.refuse_credentials(list(args)) == args
