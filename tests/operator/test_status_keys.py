"""The status keys written as constants are the typed model's wire names (the one source)."""

from __future__ import annotations

from lorarl.api import types as api
from lorarl.control import status
from lorarl.reporter import statuskeys


def wire_names(model: type) -> set[str]:
    return {info.alias or name for name, info in model.model_fields.items()}


def test_the_operator_and_the_reporter_own_every_status_field_between_them():
    fields = wire_names(api.LoraRLJobStatus)
    assert set(status.OWNED_FIELDS) | set(statuskeys.OWNED_FIELDS) == fields
    assert not set(status.OWNED_FIELDS) & set(statuskeys.OWNED_FIELDS)


def test_every_reporter_key_names_a_field_of_its_part():
    parts = {
        "progress": api.Progress,
        "metrics": api.TrainingMetrics,
        "metrics.nonFinite": api.NonFiniteMetric,
        "eval": api.EvalScore,
        "checkpoints": api.CheckpointStatus,
        "tracking": api.TrackingStatus,
        "history": api.History,
        "history.eval": api.EvalCurve,
    }
    known = set().union(*(wire_names(m) for m in parts.values())) | set(parts)
    constants = {k: v for k, v in vars(statuskeys).items() if k.isupper() and isinstance(v, str)}
    assert constants, "no constants found: the check proves nothing"
    unknown = {k: v for k, v in constants.items() if v not in known}
    assert not unknown, f"reporter status keys the typed model does not have: {unknown}"
    for part, model in parts.items():  # and every leaf of a part has its constant
        assert wire_names(model) <= set(constants.values()), part


def test_condition_types_are_those_the_model_documents():
    description = api.LoraRLJobStatus.model_fields["conditions"].description
    for type_ in status.CONDITION_TYPES:
        assert type_ in description
