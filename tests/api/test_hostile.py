"""The hostile corpus (tests/api/hostile/*.yaml): what the API server admits, the operator can run.

Each file starts with a one-line comment (why the case exists) and holds a LoraRLJob (`job`) and
what must happen to it (`expect`): either accepted, or refused naming `field` with `words` in
the message. A case with `update` is created first and then edited with that spec merge patch
(transition rules: only the API server can judge those, it compares with the stored object).

Every case is checked against `lorarl validate` (offline) and against the real API server
(server-side dry run, strict field validation): both must give the expected answer, so they
agree with each other. An accepted case must then be safe: the operator's read of what the
server stored renders children the API server accepts (KubeRay's RayJob CRD, and the Ray pod
templates as Pods), and the command the trainer receives through the real quoting chain is
exactly the rendered one. tests/operator/test_hostile_operator.py runs the accepted cases
through the real operator process. The corpus table is docs/hostile-input.md (generated from
these files; a test fails when it drifts: LORARL_UPDATE_DOCS=1 rewrites it)."""

from __future__ import annotations

import copy
import os
import pathlib

import pytest
from lorarl.admission.validation import validate
from lorarl.control.stored import parse_stored
from lorarl.job import command, render

from tests.api.hostile_cases import ACCEPTED, CASES, load_case, update_of
from tests.api.quoting_chain import Chain, every_variant
from tests.kuberay_schema import rayjob_errors

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "hostile-input.md"


def why(path: pathlib.Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# "), f"{path.name}: the first line must say why the case exists"
    return first[2:].strip()


IDS = [p.stem for p in CASES]


def test_corpus_size_and_summary():
    refused = [p for p in CASES if p not in ACCEPTED]
    edits = [p for p in CASES if update_of(p) is not None]
    print(
        f"\nhostile corpus: {len(CASES)} cases: {len(refused)} refused naming the field "
        f"({len(edits)} of them edits of immutable fields), {len(ACCEPTED)} accepted and shown safe"
    )
    assert len(CASES) >= 40 and len(refused) >= 25 and len(ACCEPTED) >= 5


def corpus_table() -> str:
    lines = [
        "# Hostile input: the corpus",
        "",
        "<!-- generated from tests/api/hostile/*.yaml by tests/api/test_hostile.py; do not edit "
        "(LORARL_UPDATE_DOCS=1 .venv/bin/python -m pytest tests/api/test_hostile.py -k table) -->",
        "",
        "Invalid and hostile LoraRLJobs, each checked against `lorarl validate` and the real API server",
        "(tests/api/test_hostile.py). A refused case must be refused by both, with a message naming the",
        "field; an edit is sent to a stored job (transition rules: only the API server can judge it).",
        "An accepted case must be safe: the children rendered from what the server stored are accepted",
        "by the API server (KubeRay's RayJob CRD; the Ray pod templates as Pods), the trainer's argv",
        "through the real quoting chain (KubeRay's submitter bash, Ray's `list2cmdline`/`shlex.join`,",
        "the head's shell: tests/api/quoting_chain.py) is exactly the rendered command, and the real",
        "operator process reconciles it (tests/operator/test_hostile_operator.py).",
        "",
        f"{len(CASES)} cases: {len(CASES) - len(ACCEPTED)} refused, {len(ACCEPTED)} accepted and safe.",
        "",
        "| case | why | expected |",
        "|---|---|---|",
    ]
    for path in CASES:
        _, expect = load_case(path)
        if expect.get("accepted"):
            outcome = "accepted, safe"
        else:
            outcome = f"refused: `{expect['field']}` ({expect['words']})"
            if update_of(path) is not None:
                outcome = "edit " + outcome
        lines.append(f"| `{path.stem}` | {why(path).replace('|', '/')} | {outcome} |")
    return "\n".join(lines) + "\n"


def test_the_corpus_table_in_the_docs_is_current():
    table = corpus_table()
    if os.environ.get("LORARL_UPDATE_DOCS"):
        DOC.write_text(table)
    assert DOC.read_text() == table, "docs/hostile-input.md is stale: LORARL_UPDATE_DOCS=1 rewrites it"


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_lorarl_validate_gives_the_expected_answer(path):
    why(path)
    doc, expect = load_case(path)
    job, problems = validate(copy.deepcopy(doc))  # never raises
    if update_of(path) is not None:
        # the job itself is fine: only the edit of a stored job is refused (by the API server)
        assert problems == [], problems
        return
    if expect.get("accepted"):
        assert problems == [], problems
        assert rayjob_errors(render.render(job)[-1]) == []
        return
    assert job is None
    assert any(p.field == expect["field"] and expect["words"] in p.message for p in problems), problems


@pytest.fixture(scope="module")
def chain():
    with Chain() as c:
        yield c


@pytest.mark.parametrize("path", ACCEPTED, ids=[p.stem for p in ACCEPTED])
def test_accepted_cases_reach_the_trainer_exactly(chain, path):
    doc, _ = load_case(path)
    job, _ = validate(copy.deepcopy(doc))
    entrypoint = render.render(job)[-1]["spec"]["entrypoint"]
    for joiner, shell in every_variant():
        assert chain.run(entrypoint, joiner=joiner, head_shell=shell).argv == command.entrypoint_argv(job)[1:], (joiner, shell)


def _server_names_the_field(answer, field: str) -> bool:
    return any(f.startswith(field) for f in answer.fields) or field in answer.message.lower() or field in answer.message


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_api_server_gives_the_expected_answer(path, kube_api, namespace):
    from tests.api.apiserver import create, dry_run_apply, dry_run_create, dry_run_patch_spec, pods_of

    doc, expect = load_case(path)
    edit = update_of(path)
    if edit is not None:
        create(kube_api, namespace, doc)
        answer = dry_run_patch_spec(kube_api, namespace, doc["metadata"]["name"], edit)
    else:
        answer = dry_run_create(kube_api, namespace, doc)
    if not expect.get("accepted"):
        assert not answer.accepted
        assert _server_names_the_field(answer, expect["field"]), answer
        assert expect["words"] in answer.message, answer.message
        return
    assert answer.accepted, answer.message
    # safe: what the server stored, read as the operator reads it, renders children it accepts
    stored = create(kube_api, namespace, doc)
    job, unknown = parse_stored(stored)
    assert unknown == []
    children = render.render(job)
    for child in children + pods_of(children[-1]):
        refused = dry_run_apply(kube_api, child)
        assert refused.accepted, (child["kind"], refused.message)


def test_the_pod_probe_can_fail(kube_api, namespace):
    """The Pod check above is a real one: a template the CRD schema would let through is refused
    by the API server's Pod validation (an Exists toleration with a value, a negative quantity)."""
    from tests.api.apiserver import dry_run_apply, pods_of
    from tests.helpers import job_from, seed_doc

    doc = seed_doc()
    doc["metadata"]["namespace"] = namespace
    rayjob = render.render(job_from(doc))[-1]
    pod = pods_of(rayjob)[0]
    assert dry_run_apply(kube_api, pod).accepted
    pod["spec"]["tolerations"] = [{"key": "k", "operator": "Exists", "value": "v"}]
    answer = dry_run_apply(kube_api, pod)
    assert not answer.accepted and "spec.tolerations[0].operator" in answer.message, answer
    pod = pods_of(rayjob)[0]
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-1"
    answer = dry_run_apply(kube_api, pod)
    assert not answer.accepted and "must be greater than or equal to 0" in answer.message, answer


def test_the_renderer_refuses_a_token_admitted_under_an_older_crd():
    """The controller's read skips the CRD's rules (the server ran them at admission); a token in
    extraArgs of a job admitted before the rule existed still never reaches the command line,
    and the message does not repeat it."""
    from lorarl.api.problems import InvalidJob

    from tests.helpers import seed_doc

    token = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    doc = seed_doc()
    doc["spec"]["extraArgs"] = ["--hub-model-id", token]
    with pytest.raises(InvalidJob) as err:
        parse_stored(doc)
    assert "spec.extraArgs[1]" in str(err.value) and token not in str(err.value)
