"""The status dicts the operator writes (api.types.*Dict, typed for mypy) say what the models the
CRD is generated from say: the same keys (the models' aliases), the same value types, every field
the model requires required."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Union

import pytest
from lorarl.api import types as api
from lorarl.control import status

# each dict and the model it mirrors
MIRRORS: dict[Any, type] = {
    api.ConditionDict: api.Condition,
    api.RayJobMirrorDict: api.RayJobMirror,
    api.OperatorStatusDict: api.LoraRLJobStatus,
}
# status.adapter and status.serving are carried as the pods reported them (validated there)
DOCUMENTS = {"adapter": api.AdapterStatus, "serving": api.ServingStatus}


def plain(annotation: Any) -> Any:
    """An annotation without its constraints (Annotated) and without None (a field absent)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return plain(args[0])
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return plain(rest[0]) if len(rest) == 1 else tuple(plain(a) for a in rest)
    if origin is list:
        return list[plain(args[0])]
    return MIRRORS.get(annotation, annotation)


@pytest.mark.parametrize("typed", list(MIRRORS), ids=lambda t: t.__name__)
def test_each_status_dict_mirrors_its_model(typed):
    model = MIRRORS[typed]
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    hints = typing.get_type_hints(typed)
    assert set(hints) <= set(fields), f"{typed.__name__}: keys the model does not have"
    if typed is not api.OperatorStatusDict:  # the operator's part of the status only
        assert set(hints) == set(fields), f"{typed.__name__}: keys missing"
    required = {alias for alias, f in fields.items() if f.is_required()}
    assert required <= typed.__required_keys__, f"{typed.__name__}: the model requires more"
    for key, hint in hints.items():
        if key in DOCUMENTS and typed is api.OperatorStatusDict:
            assert hint == dict[str, Any] and plain(fields[key].annotation) is DOCUMENTS[key]
            continue
        assert plain(hint) == plain(fields[key].annotation), f"{typed.__name__}.{key}"


def test_the_status_dict_holds_the_fields_the_mapping_owns():
    """gpuAccounting (and progress.gpuHours) are added by the reconcile, from control/gpuhours.py."""
    owned = set(status.OWNED_FIELDS) - {status.GPU_ACCOUNTING}
    assert set(typing.get_type_hints(api.OperatorStatusDict)) == owned
