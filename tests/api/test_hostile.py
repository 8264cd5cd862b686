"""The hostile corpus (tests/api/hostile/*.yaml): what the API server admits, the operator can run.

Each file holds a LoraRLJob (`job`) and what must happen to it (`expect`): either accepted, or
refused naming `field` with `words` in the message. Every case is checked against `lorarl
validate` (offline) and against the real API server (server-side dry run, strict field
validation): both must give the expected answer, so they agree with each other."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from lorarl import render
from lorarl.validation import validate
from tests.kuberay_schema import rayjob_errors

CORPUS = pathlib.Path(__file__).parent / "hostile"


def load_case(path: pathlib.Path) -> tuple[dict, dict]:
    case = yaml.safe_load(path.read_text())
    job = case["job"]
    if "expand" in case:  # a huge value, built here instead of committed
        node = job
        *parents, leaf = case["expand"]["path"]
        for name in parents:
            node = node[name]
        node[leaf] = case["expand"]["text"] * case["expand"]["times"]
    return job, case["expect"]


CASES = sorted(CORPUS.glob("*.yaml"))
IDS = [p.stem for p in CASES]


def test_corpus_covers_every_class():
    assert len(CASES) >= 25
    refused = [p for p in CASES if not load_case(p)[1].get("accepted")]
    assert len(refused) >= 25


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_lorarl_validate_gives_the_expected_answer(path):
    doc, expect = load_case(path)
    job, problems = validate(copy.deepcopy(doc))  # never raises
    if expect.get("accepted"):
        assert problems == [], problems
        assert rayjob_errors(render.render(job)[-1]) == []
        return
    assert job is None
    assert any(p.field == expect["field"] and expect["words"] in p.message for p in problems), problems


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_api_server_gives_the_expected_answer(path, kube_api, namespace):
    from tests.api.apiserver import dry_run_create

    doc, expect = load_case(path)
    answer = dry_run_create(kube_api, namespace, doc)
    if expect.get("accepted"):
        assert answer.accepted, answer.message
        return
    assert not answer.accepted
    assert any(f.startswith(expect["field"]) for f in answer.fields) or expect["field"] in answer.message.lower(), answer
    assert expect["words"] in answer.message, answer.message
