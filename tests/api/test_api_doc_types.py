"""docs/api.md shows types as a user reads them, not as Python spells them."""

from __future__ import annotations

import re

from lorarl_dev import docsgen

from tests.helpers import REPO

API_DOC = REPO / "docs" / "api.md"


def type_cells(markdown: str) -> dict[str, str]:
    """Field -> type cell of every field table row."""
    cells = {}
    fields = markdown.split("## Validation rules")[0]  # the rules table lists CEL, not fields
    for line in fields.splitlines():
        row = re.match(r"^\| `([^`]+)` \| (.*?) \| ", line)
        if row:
            cells.setdefault(row.group(1), row.group(2))
    return cells


def test_no_python_type_spellings():
    for text in (API_DOC.read_text(), docsgen.api_markdown()):
        for python_spelling in ("typing.", "Annotated", "StringConstraints", "<class", "Optional[", "NoneType"):
            assert python_spelling not in text


def test_types_read_as_kubernetes_types():
    cells = type_cells(docsgen.api_markdown())
    assert cells["extraArgs"] == "list[string]"
    assert cells["nodeSelector"] == "map[string]string"
    assert cells["shmSize"] == "string (quantity)"
    assert cells["nodes"] == "integer" and cells["normEpsilon"] == "number" and cells["suspend"] == "boolean"
    assert cells["accelerator"].startswith('"MI300X" \\| "MI325X"')
    assert cells["tolerations"] == "list[[object](#spechardwaretolerations)]"
    assert cells["lastUpdateTime"] == "string (date-time)"
    allowed = re.compile(
        r'^(list\[){0,2}(string( \(quantity\)| \(date-time\))?|integer|number|boolean|object|map\[string\]string|\[object\]\(#[a-z0-9]+\)|"[^"]+"( \\\| "[^"]+")*)\]{0,2}$'
    )
    for field, cell in cells.items():
        assert allowed.match(cell), f"{field}: {cell}"


def test_object_links_reach_their_sections():
    markdown = docsgen.api_markdown()
    anchors = {"#" + re.sub(r"[^a-z0-9_-]", "", h.lower()) for h in re.findall(r"^### `([^`]+)`$", markdown, re.M)}
    links = re.findall(r"\]\((#[^)]+)\)", markdown)
    assert links and set(links) <= anchors, set(links) - anchors
