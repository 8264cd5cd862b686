"""Manifests read as kubectl reads them: which files ``-f``/``-R`` name, and what their YAML means.

kubectl (and helm, Argo CD, Flux: all through sigs.k8s.io/yaml) turns YAML into JSON with
go-yaml v2 (``yaml.Unmarshal`` into ``interface{}``, sigs.k8s.io/yaml yaml.go ``yamlToJSON``),
and the API server sees only that JSON. PyYAML's YAML 1.1 resolver reads some plain scalars
differently, so the same text would be judged as another object:

====================  ========================  ==========================
plain scalar          PyYAML (YAML 1.1)         go-yaml v2 -> JSON
====================  ========================  ==========================
``2e-5``, ``1e3``     the string "2e-5"         2e-05, 1000 (a float)
``0o20``              the string "0o20"         16
``y``, ``N``          the string "y"            true, false
``2024-01-01``        a date                    the string "2024-01-01"
``1:30``              90 (base 60)              the string "1:30"
====================  ========================  ==========================

``GoYamlLoader`` resolves plain scalars as go-yaml v2.4 does (resolve.go ``resolve``: the
``resolveMap`` words, then for a leading digit, sign or dot ``strconv.ParseInt(plain, 0, 64)``
with ``_`` removed, ``ParseUint``, the ``yamlStyleFloat`` pattern, ``0b`` binary; timestamps
stay strings when decoded into ``interface{}``, decode.go ``scalar``), and ``wire_form`` then
gives numbers the form Go's encoding/json writes (a float64 without a fraction is written as an
integer below 1e21), which is what the API server decodes.

A mapping key given twice is not an error for kubectl (go-yaml v2's non-strict ``Unmarshal``:
the last value wins, checked with kubectl 1.37 in tests/api/test_yaml_differential.py); it is
reported as a warning here, with the same (last) value kept.

Files: a directory gives its ``.json``, ``.yaml`` and ``.yml`` files in lexical order, its
subdirectories only with ``-R``; a file named explicitly is read whatever its name
(k8s.io/cli-runtime pkg/resource/visitor.go ``ExpandPathsToFileVisitors``, ``FileExtensions``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

# go-yaml v2 resolve.go: resolveMapList, the words a plain scalar is looked up in first
_WORDS: dict[str, Any] = {}
for _value, _words in (
    (True, "y Y yes Yes YES true True TRUE on On ON"),
    (False, "n N no No NO false False FALSE off Off OFF"),
    (None, "~ null Null NULL"),
    (math.nan, ".nan .NaN .NAN"),
    (math.inf, ".inf .Inf .INF +.inf +.Inf +.INF"),
    (-math.inf, "-.inf -.Inf -.INF"),
):
    for _word in _words.split():
        _WORDS[_word] = _value
# resolve.go yamlStyleFloat: unlike YAML 1.1, no dot is needed and the exponent sign is optional
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_GO_INT_PREFIXES = re.compile(r"[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_NUMBER_START = "+-.0123456789"
# JSON (and so the API server) has no NaN or infinities: Go's json.Marshal fails on them, so
# kubectl refuses such a document before sending it
EXTENSIONS = (".json", ".yaml", ".yml")


def go_yaml_scalar(text: str) -> Any:
    """The value go-yaml v2 gives an untagged plain scalar decoded into ``interface{}``."""
    if text in _WORDS or text == "":
        return _WORDS.get(text)
    if text[0] not in _NUMBER_START:
        return text
    plain = text.replace("_", "")
    number = _go_int(plain)
    if number is not None:
        return number
    if _GO_FLOAT.fullmatch(plain):
        value = float(plain)
        if not math.isinf(value):  # ParseFloat's range error: go-yaml keeps the text
            return value
    return text  # a timestamp, "1:30", "1.2.3": strings


def _go_int(plain: str) -> int | None:
    """strconv.ParseInt(plain, 0, 64), then ParseUint (resolve.go); None when neither parses."""
    if not _GO_INT_PREFIXES.fullmatch(plain):
        return None
    sign = -1 if plain[0] == "-" else 1
    digits = plain.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1] in "0123456789":
        value = int(digits, 8)  # a leading 0 is octal for ParseInt's base 0
    else:
        value = int(digits, 0)
    value *= sign
    if -(2**63) <= value < 2**64:
        return value
    return None  # out of range: go-yaml then tries the float pattern


class GoYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader with go-yaml v2's reading of plain scalars (see the module doc)."""

    duplicate_keys: list[str]


# no implicit resolvers but the one below: every plain scalar goes to go_yaml_scalar
GoYamlLoader.yaml_implicit_resolvers = {}
GoYamlLoader.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^<<$"), ["<"])
GoYamlLoader.add_implicit_resolver("tag:lorarl.dev,2026:go-plain", re.compile(r"^"), None)


def _construct_go_plain(loader: GoYamlLoader, node: yaml.ScalarNode) -> Any:
    return go_yaml_scalar(loader.construct_scalar(node))


def _construct_mapping(loader: GoYamlLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)):
            raise yaml.constructor.ConstructorError(None, None, f"unsupported map key {key!r}", key_node.start_mark)
        key = _json_key(key)
        if key in out:
            loader.duplicate_keys.append(f"line {key_node.start_mark.line + 1}: {key!r} is given twice; the last value counts (as for kubectl)")
        out[key] = loader.construct_object(value_node, deep=True)
    return out


def _json_key(key: Any) -> str:
    """sigs.k8s.io/yaml convertToJSONableObject: map keys become strings."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(key, ".nan" if math.isnan(key) else repr(key).removesuffix(".0"))
    return str(key)


GoYamlLoader.add_constructor("tag:lorarl.dev,2026:go-plain", _construct_go_plain)
GoYamlLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
# a plain "<<" key that go-yaml treats as a merge key is a string elsewhere: merges are
# flattened by flatten_mapping above, so the tag needs no value of its own
GoYamlLoader.add_constructor("tag:yaml.org,2002:merge", lambda loader, node: "<<")


def wire_form(value: Any, at: str = "") -> Any:
    """The value as JSON carries it to the API server: float64s without a fraction written as
    integers (Go's encoding/json formats them with 'f' below 1e21, so the server decodes an
    integer); NaN and infinities refused, as json.Marshal refuses them."""
    if isinstance(value, dict):
        return {k: wire_form(v, f"{at}.{k}" if at else k) for k, v in value.items()}
    if isinstance(value, list):
        return [wire_form(v, f"{at}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ManifestError(f"{at or 'the document'}: {value} cannot be sent as JSON (kubectl refuses it too)")
        if value.is_integer() and abs(value) < 1e21:
            return int(value)
    return value


class ManifestError(ValueError):
    """A file that kubectl would not send at all (not YAML, not JSON-representable)."""


@dataclass
class Document:
    where: str  # "<file>#<n>"
    body: Any
    warnings: list[str] = field(default_factory=list)


def documents(text: str, source: str) -> Iterator[Document]:
    """The non-empty YAML documents of ``text`` as the API server would receive them."""
    loader = GoYamlLoader(text)
    loader.duplicate_keys = []
    try:
        index = 0
        while loader.check_data():
            index += 1
            body = loader.get_data()
            warnings, loader.duplicate_keys = loader.duplicate_keys, []
            if body is not None:
                yield Document(f"{source}#{index}", wire_form(body), warnings)
    except yaml.YAMLError as err:
        raise ManifestError(f"{source}: not valid YAML: {err}") from err
    finally:
        loader.dispose()


def expand(paths: list[str], recursive: bool) -> list[str]:
    """The files ``kubectl -f PATH... [-R]`` reads, in its order ('-' is stdin)."""
    files: list[str] = []
    for root in paths:
        if root == "-" or not os.path.isdir(root):
            files.append(root)  # named explicitly: read whatever its name (or fail on reading it)
        else:
            files += _walk(root, recursive)
    return files


def _walk(directory: str, recursive: bool) -> list[str]:
    """filepath.Walk's order (entries by name, a subdirectory where its name sorts) without
    following symbolic links to directories (Walk uses Lstat)."""
    out: list[str] = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            if recursive:
                out += _walk(path, recursive)
        elif name.endswith(EXTENSIONS):
            out.append(path)
    return out


def read(paths: list[str], recursive: bool, stdin: Any) -> Iterator[Document]:
    """Every document of the files ``-f PATH... [-R]`` names ('-': ``stdin``)."""
    files = expand(paths, recursive)
    if not files:
        raise ManifestError(f"{', '.join(paths)}: no .json, .yaml or .yml file found" + ("" if recursive else " (-R reads subdirectories)"))
    for path in files:
        if path == "-":
            text, source = stdin.read(), "-"
        else:
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as err:
                raise ManifestError(f"{path}: cannot be read: {err}") from None
            source = path
        yield from documents(text, source)
