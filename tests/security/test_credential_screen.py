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


# ---------------------------------------------------------------- issue 35, finding 5

# The scanners' own positive samples (lorarl/api/secret_scanners.py vendors their rules), each a
# value the screen must refuse. detect-secrets at 5e141933554a0b74e7341841f318be21e895339c:
DETECT_SECRETS_SAMPLES = [
    ("tests/plugins/aws_key_test.py", "AKIAZZZZZZZZZZZZZZZZ"),
    ("tests/plugins/aws_key_test.py", "A3T0ZZZZZZZZZZZZZZZZ"),
    ("tests/plugins/aws_key_test.py", "ABIAZZZZZZZZZZZZZZZZ"),
    ("tests/plugins/aws_key_test.py", "ACCAZZZZZZZZZZZZZZZZ"),
    ("tests/plugins/aws_key_test.py", "ASIAZZZZZZZZZZZZZZZZ"),
    ("tests/plugins/aws_key_test.py EXAMPLE_SECRET", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),  # an AWS secret access key
    ("tests/plugins/stripe_key_test.py", "sk_live_ReTllpYQYfIZu2Jnf2lAPFjD"),
    ("tests/plugins/stripe_key_test.py", "rk_live_5TcWfjKmJgpql9hjpRnwRXbT"),
    ("tests/plugins/gitlab_token_test.py", "glpat-hellOworld380_testin"),
    ("tests/plugins/gitlab_token_test.py", "gldt-HwllOuhfw-wu0rlD_yep"),
    ("tests/plugins/github_token_test.py", "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"),
    ("tests/plugins/openai_test.py", "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"),
    ("tests/plugins/openai_test.py", "sk-proj-Xi8tdMjHV6pmbBbwilTeT3BlbkFJ3UDnpdEwNNm6wVBpYM0o"),
    ("tests/plugins/slack_test.py", "xoxp-523423-234243-234233-e039d02840a0b9379c"),
    ("tests/plugins/slack_test.py", "xoxo-523423-234243-234233-e039d02840a0b9379c"),
    ("tests/plugins/slack_test.py", "xoxs-523423-234243-234233-e039d02840a0b9379c"),
    ("tests/plugins/slack_test.py", "xoxa-511111111-31111111111-3111111111111-e039d02840a0b9379c"),
    ("tests/plugins/slack_test.py", "xoxa-2-511111111-31111111111-3111111111111-e039d02840a0b9379c"),
    ("tests/plugins/slack_test.py", "xoxr-523423-234243-234233-e039d02840a0b9379c"),
    ("tests/plugins/slack_test.py", "xoxb-34532454-e039d02840a0b9379c"),
    ("tests/plugins/slack_test.py", "https://hooks.slack.com/services/Txxxxxxxx/Bxxxxxxxx/xxxxxxxxxxxxxxxxxxxxxxxx"),
    (
        "tests/plugins/jwt_test.py",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    ),
    (
        "tests/plugins/pypi_token_test.py",
        "pypi-AgEIcHlwaS5vcmcCJDU3OTM1MjliLWIyYTYtNDEwOC05NzRkLTM0MjNiNmEwNWIzYgACF1sxLFsitesttestbWluaW1hbC1wcm9qZWN0Il1dAAIsWzIsWyJjYWY4OTAwZi0xNDMwLTRiYQstYmFmMi1mMDE3OGIyNWZhNTkiXV0AAAYgh2UINPjWBDwT0r3tQ1o5oZyswcjN0-IluP6z34SX3KM",
    ),
]
# gitleaks at b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b, cmd/generate/config/rules/*.go: the literal
# true positives of the rule generators, and (npm.go, gitlab.go) a value of the shape their
# generated samples take ("npm_" + utils.AlphaNumeric("36"), "glpat-" + utils.AlphaNumeric("20"))
GITLEAKS_SAMPLES = [
    ("aws.go", "AKIALALEMEL33243OLIB"),
    ("gcp.go", "AIzaSyNHxIf32IQ1a1yjl3ZJIqKZqzLAK1XhDk-"),
    ("stripe.go", "sk_test_51OuEMLAlTWGaDypq4P5cuDHbuKeG4tAGPYHJpEXQ7zE8mKK3jkhTFPvCxnSSK5zB5EQZrJsYdsatNmAHGgb0vSKD00GTMSWRHs"),
    ("stripe.go", "rk_prod_51OuEMLAlTWGaDypquDn9aZigaJOsa9NR1w1BxZXs9JlYsVVkv5XDu6aLmAxwt5Tgun5WcSwQMKzQyqV16c9iD4sx00BRijuoon"),
    ("huggingface.go", "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"),
    ("npm.go (shape)", "npm_" + "q7Zp3Lx9Tb2Kw5Nd8Rf1Hc6Vm4Jy0Gs3Ua7E"),
    ("gitlab.go (shape)", "glpat-" + "Xq7Zp3Lx9Tb2Kw5Nd8Rf"),
]
SCANNER_SAMPLES = DETECT_SECRETS_SAMPLES + GITLEAKS_SAMPLES
# flags the former word list let through (issue 35): detect-secrets' "pw", and "tok" (ours)
FLAGS_REFUSED = [["--pw", "x"], ["--hf-tok", "x"], ["--pw=notshaped"], ["--db-pass", "x"]]
# values with a character outside the items' syntax: refused, and never quoted back
UNECHOED = [
    {"extraArgs": ["--wandb-key=SENTvalue#1"]},
    {"extraArgs": ["--run-note", "SENTvalue#2"]},
    {"extraArgs": ["--run-note", "SENT" + "v" * 300]},  # too long
    {"tracking": {"wandb": {"project": "SENTvalue#3", "apiKeySecretRef": {"name": "wandb", "key": "k"}}}},
    {"tracking": {"wandb": {"team": "SENTvalue#4", "apiKeySecretRef": {"name": "wandb", "key": "k"}}}},
    {"eval": {"datasets": [{"name": "SENTvalue#5", "repo": "zhuzilin/aime-2024"}]}},
]


def raw_dry_run(kube_api, namespace: str, doc: dict) -> tuple[int, str]:
    """The API server's answer to a dry-run create, as sent (the whole 422 body)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    body = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    try:
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PLURAL, body, dry_run="All", field_validation="Strict"
        )
    except ApiException as err:
        return err.status, err.body if isinstance(err.body, str) else err.body.decode()
    return 201, ""


def test_the_screen_is_made_of_the_scanners_patterns():
    from lorarl.api import secret_scanners as scanners

    assert len(scanners.GITLEAKS_RULES) >= 100 and scanners.gitleaks_tokens() in api.ACCESS_KEY_SHAPED_VALUE
    assert scanners.DETECT_SECRETS_AWS_ACCESS_KEY_SHAPE in api.ACCESS_KEY_SHAPED_VALUE
    for rule_id, regex in scanners.GITLEAKS_RULES:  # each token, RE2 syntax that Python reads alike
        core = scanners.token_core(regex)
        assert "(?i)" not in core and "[[:" not in core and "\\z" not in core, rule_id
        re.compile(core)


@pytest.mark.parametrize(("source", "value"), SCANNER_SAMPLES, ids=[f"{s}:{v[:12]}" for s, v in SCANNER_SAMPLES])
def test_validate_refuses_the_scanners_samples_unechoed(source, value):
    for args in (["--run-note", value], ["--run-note=" + value]):
        _, problems = validate(with_spec({"extraArgs": args}))
        assert any(p.field.startswith("spec.extraArgs") for p in problems), (source, problems)
        assert not any(value in p.message for p in problems)
        with pytest.raises(ValueError) as err:
            command.refuse_credentials(list(args))
        assert value not in str(err.value)


@pytest.mark.parametrize("args", FLAGS_REFUSED, ids=[" ".join(a) for a in FLAGS_REFUSED])
def test_validate_refuses_short_credential_flags(args):
    _, problems = validate(with_spec({"extraArgs": args}))
    assert any(p.field.startswith("spec.extraArgs") for p in problems), problems


@pytest.mark.parametrize("spec", UNECHOED, ids=[json.dumps(s)[:50] for s in UNECHOED])
def test_validate_never_quotes_a_refused_value(spec):
    _, problems = validate(with_spec(spec))
    assert problems and not any("SENT" in p.message for p in problems), problems


def test_the_api_server_refuses_the_scanners_samples_naming_the_field_only(kube_api, namespace):
    # one dry run per sample: the value as an item, and after '=' in one item
    for source, value in SCANNER_SAMPLES:
        for args in (["--run-note", value], ["--run-note=" + value]):
            code, body = raw_dry_run(kube_api, namespace, with_spec({"extraArgs": args}))
            assert code == 422 and "spec.extraArgs" in body, (source, args, code, body[:300])
            assert value not in body, (source, body)
    for args in FLAGS_REFUSED:
        code, body = raw_dry_run(kube_api, namespace, with_spec({"extraArgs": args}))
        assert code == 422 and "spec.extraArgs" in body and "credential-like flag" in body, (args, body[:300])


@pytest.mark.parametrize("spec", UNECHOED, ids=[json.dumps(s)[:50] for s in UNECHOED])
def test_the_api_server_never_quotes_a_refused_value(kube_api, namespace, spec):
    code, body = raw_dry_run(kube_api, namespace, with_spec(spec))
    assert code == 422, body
    assert "SENT" not in body, body
    field = next(iter(spec))
    assert f"spec.{field}" in body, body
