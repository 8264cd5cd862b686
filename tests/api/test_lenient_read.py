"""The controller's read of stored objects is lenient; times parse whatever the API server writes."""

from __future__ import annotations

import datetime

import pytest
from lorarl.admission.validation import validate
from lorarl.api.problems import InvalidJob
from lorarl.control.reconcile import parse_time
from lorarl.control.stored import parse_stored
from lorarl.job import command, paths

from tests.helpers import seed_doc

UTC = datetime.UTC


def test_unknown_fields_are_dropped_and_named():
    doc = seed_doc()
    doc["spec"]["hardware"]["topologyAware"] = True
    doc["spec"]["newBlock"] = {"x": 1}
    doc["spec"]["eval"] = {"datasets": [{"name": "a", "repo": "x/y", "weight": 2}]}
    job, unknown = parse_stored(doc)
    assert sorted(unknown) == ["spec.eval.datasets[0].weight", "spec.hardware.topologyAware", "spec.newBlock"]
    assert job.spec.hardware.accelerator == "MI355X"
    # `lorarl validate` stays strict about the same document
    assert {p.field for p in validate(doc)[1]} == set(unknown)


def test_cel_rules_are_not_rerun_on_stored_objects():
    """A rule the API server ran at admission (here: one a newer release could relax) is not
    re-judged by the controller: a stored object always renders."""
    doc = seed_doc()
    doc["spec"]["eval"] = {"interval": 500}  # today's CRD refuses this (interval > numRollouts)
    assert validate(doc)[1]
    job, unknown = parse_stored(doc)
    assert unknown == [] and job.spec.eval.interval == 500


def test_a_spec_that_cannot_be_rendered_is_still_invalid():
    doc = seed_doc()
    doc["spec"]["hardware"]["accelerator"] = "MI999X"
    with pytest.raises(InvalidJob) as err:
        parse_stored(doc)
    assert "spec.hardware.accelerator" in str(err.value)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2026-11-30T12:00:00Z", datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)),
        ("2026-11-30T12:00:00.123456Z", datetime.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-30T12:00:00.123456789Z", datetime.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-30T14:00:00+02:00", datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)),
        ("2026-11-30t12:00:00z", datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)),
        ("2026-11-30T12:00:00", None),
        ("yesterday", None),
        ("", None),
        (None, None),
        (1234, None),
        ("2026-13-45T99:00:00Z", None),
    ],
)
def test_parse_time(text, expected):
    assert parse_time(text) == expected


def test_check_tokens_refuses_a_trailing_newline():
    with pytest.raises(paths.UnsafeTokenError):
        command.check_tokens(["--input-key", "prompt\n"])


@pytest.mark.parametrize("args", [["--wandb-api-key", "abc123"], ["--hf-token=abc123"], ["--my_secret", "x"]])
def test_the_controller_refuses_a_credential_flag_a_stored_job_carries(args):
    """A job admitted under an older CRD (no credential rule) must not reach the command line."""
    doc = seed_doc()
    doc["spec"]["extraArgs"] = args
    with pytest.raises(InvalidJob, match=r"spec.extraArgs\[0\].*credential"):
        parse_stored(doc)


def test_a_data_key_flag_is_not_a_credential():
    doc = seed_doc()
    doc["spec"]["extraArgs"] = ["--metadata-key", "answer"]
    job, _ = parse_stored(doc)
    assert "--metadata-key" in " ".join(job.spec.extra_args)
