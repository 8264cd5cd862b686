"""docs/troubleshooting.md against the code: every reason it documents is one the status mapping
produces, and every reason the mapping produces (the Ready reason, the REASON column) is
documented. The produced reasons come from running ``lorarl.control.status.compute`` over every
row of the mapping table (KubeRay's states and reasons, Kueue's, the pods', the health gate's,
NoProgress, the OOM marker), not from a list kept beside the code."""

from __future__ import annotations

import pathlib
import re

from lorarl.control import pods

from tests.operator.status_table import TABLE, computed

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"


def documented() -> set[str]:
    """The reasons named in the doc's ``### `Reason` `` headings."""
    headings = [line for line in DOC.read_text().splitlines() if line.startswith("### ")]
    return {name for line in headings for name in re.findall(r"`([A-Za-z]+)`", line)}


def produced() -> set[str]:
    return {next(c["reason"] for c in computed(case)["conditions"] if c["type"] == "Ready") for case in TABLE}


def test_every_documented_reason_is_one_the_mapping_produces():
    assert documented() - produced() == set()


def test_every_reason_the_mapping_produces_is_documented():
    assert produced() - documented() == set()


def test_every_pod_reason_is_produced():
    assert set(pods.REASONS) <= produced()


def test_the_real_node_table_names_documented_reasons():
    """The table of failures caused on the real node (tests/e2e/test_failures.py; "What common
    failures look like") names reasons that have a section."""
    text = DOC.read_text()
    table = text[text.index("## What common failures look like") :]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| failure") and "---" not in line]
    assert len(rows) >= 7, rows
    reasons = {re.findall(r"`([A-Za-z]+)`", row.split("|")[2])[0] for row in rows}
    assert reasons <= documented(), reasons - documented()
