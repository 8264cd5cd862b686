"""The README's kubectl outputs stay what the CRD makes kubectl print (the CRD is the oracle)."""

from __future__ import annotations

import re

from lorarl.admission import crdgen

from tests.helpers import REPO

README = REPO / "README.md"
LIST_COMMAND = re.compile(r"^\$ kubectl get (lorarljobs|lorarljob|lrl|lorarl)( -o wide)?$")


def code_blocks(markdown: str) -> list[list[str]]:
    return [block.split("\n") for block in re.findall(r"^```\n(.*?)\n```$", markdown, re.S | re.M)]


def columns(wide: bool) -> list[str]:
    version = crdgen.crd()["spec"]["versions"][0]
    return ["NAME"] + [c["name"].upper() for c in version["additionalPrinterColumns"] if wide or not c.get("priority")]


def listings(markdown: str):
    """(command, header, rows) of every `kubectl get` of LoraRLJobs shown in the README."""
    for block in code_blocks(markdown):
        for i, line in enumerate(block):
            command = LIST_COMMAND.match(line)
            if command:
                rows = []
                for row in block[i + 2 :]:
                    if not row or row.startswith("$"):
                        break
                    rows.append(row)
                yield line, block[i + 1], rows, bool(command.group(2))
            elif line == "$ kubectl get all":
                # the LoraRLJob table of `get all`: the header above the lorarljob.lorarl.dev/ rows
                for j in range(i + 1, len(block) - 1):
                    if block[j + 1].startswith("lorarljob.lorarl.dev/"):
                        yield line, block[j], [r for r in block[j + 1 :] if r.startswith("lorarljob.")], False
                        break
                else:
                    raise AssertionError("`kubectl get all` in the README shows no LoraRLJob")


def test_readme_listings_match_the_printer_columns():
    found = list(listings(README.read_text()))
    assert {cmd for cmd, *_ in found} >= {
        "$ kubectl get lorarljobs",
        "$ kubectl get lorarljobs -o wide",
        "$ kubectl get lrl",
        "$ kubectl get lorarl",
        "$ kubectl get all",
    }
    for command, header, rows, wide in found:
        assert header.split() == columns(wide), f"README `{command}` header drifted from the CRD's printer columns"
        assert rows, command
        if not wide and command != "$ kubectl get all":  # `get all` prefixes lorarljob.lorarl.dev/
            for line in [header, *rows]:
                assert len(line) <= 80, f"README `{command}` is wider than 80 columns: {line!r}"


def test_drift_is_detected():
    """The check above can fail: a README with an old column set does not pass it."""
    stale = "```\n$ kubectl get lorarljobs\nNAME   PHASE   ROLLOUT   TOTAL   HARDWARE   AGE\nx   Running   1   2   MI355X   1s\n```\n"
    [(_, header, _, wide)] = list(listings(stale))
    assert header.split() != columns(wide)


def test_readme_explain_matches_the_schema():
    """`kubectl explain lorarljob.spec.lora` shows the CRD's fields with their types."""
    block = next(b for b in code_blocks(README.read_text()) if b[0] == "$ kubectl explain lorarljob.spec.lora")
    shown = dict(re.findall(r"^  (\w+)\t<([^>]+)>$", "\n".join(block), re.M))
    lora = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["lora"]
    kubectl_type = {"integer": "integer", "number": "number", "boolean": "boolean", "string": "string"}

    def type_of(schema):
        if schema["type"] == "array":
            return "[]" + type_of(schema["items"])
        return kubectl_type[schema["type"]]

    assert shown == {name: type_of(schema) for name, schema in lora["properties"].items()}
