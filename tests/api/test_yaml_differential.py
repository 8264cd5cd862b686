"""`lorarl validate` reads YAML text as kubectl does: the same files, the same values, the same verdict.

The oracle is the real kubectl (its YAML-to-JSON conversion, then a server-side dry-run create on
the real API server with the generated CRD): each case is the text a person writes, given to both
as it is. Where PyYAML's YAML 1.1 reading differs from kubectl's go-yaml (numbers such as 2e-5,
0o20 and 1e2, y/n, dates, base-60), `lorarl validate` must still agree with kubectl."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

pytestmark = pytest.mark.controlplane

JOB = """apiVersion: lorarl.dev/v1alpha1
kind: LoraRLJob
metadata:
  name: {name}{metadata}
spec:
  model:
    name: Qwen/Qwen3-4B{model}
  hardware:
    accelerator: MI355X{spec}
"""


def job_text(name="yaml-case", metadata="", model="", spec=""):
    return JOB.format(name=name, metadata=metadata, model=model, spec=spec)


# (id, YAML text, accepted by kubectl and the server, the field a refusal names)
CASES = [
    ("lr-2e-5", job_text(spec="\n  optimizer:\n    lr: 2e-5"), True, None),
    ("lr-1E-4", job_text(spec="\n  optimizer:\n    lr: 1E-4"), True, None),
    ("rank-0o20-alpha-1e2", job_text(spec="\n  lora:\n    rank: 0o20\n    alpha: 1e2"), True, None),
    ("rank-hex-underscore", job_text(spec="\n  lora:\n    rank: 0x4_0"), True, None),
    ("suspend-y", job_text(spec="\n  suspend: y"), True, None),
    ("suspend-Off", job_text(spec="\n  suspend: Off"), True, None),
    ("revision-date", job_text(model="\n    revision: 2024-01-01"), True, None),
    ("rank-base-60", job_text(spec="\n  lora:\n    rank: 1:30"), False, "spec.lora.rank"),
    ("lr-inf", job_text(spec="\n  optimizer:\n    lr: .inf"), False, None),  # kubectl: "json: unsupported value: +Inf"
    ("lr-out-of-range-text", job_text(spec="\n  optimizer:\n    lr: 1e400"), False, "spec.optimizer.lr"),
    ("duplicate-key", job_text(spec="\n  optimizer:\n    lr: 2e-5\n    lr: 3e-5"), True, None),
    ("metadata-unknown-field", job_text(metadata="\n  foo: 1"), False, "metadata.foo"),
    ("metadata-label-number", job_text(metadata="\n  labels: {team: 1}"), False, "metadata.labels"),
    ("owned-flag", job_text(spec='\n  extraArgs: ["--max-tokens-per-gpu", "9000", "--lora-rank", "8"]'), False, "spec.extraArgs[2]"),
    ("credential-flag", job_text(spec='\n  extraArgs: ["--wandb-key=x"]'), False, "spec.extraArgs"),
    ("revision-option", job_text(model="\n    revision: --help"), False, "spec.model.revision"),
    (
        "dataset-revision-option",
        job_text(spec="\n  rollout:\n    promptData:\n      repo: a/b\n      revision: -rc1"),
        False,
        "spec.rollout.promptData.revision",
    ),
    (
        "flow-style-json-like",
        '{"apiVersion": "lorarl.dev/v1alpha1", "kind": "LoraRLJob", "metadata": {"name": "j"}, '
        '"spec": {"model": {"name": "Qwen/Qwen3-4B"}, "hardware": {"accelerator": "MI355X"}, "optimizer": {"lr": 2e-5}}}',
        True,
        None,
    ),
]


def lorarl(*args, stdin=None):
    from tests.helpers import lorarl_cli

    return lorarl_cli(*args, stdin=stdin)


def kubectl_dry_run(control_plane, namespace, text):
    return control_plane.kubectl("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input=text, check=False)


def read_and_validate(text: str) -> tuple[list[str], list[str]]:
    """What `lorarl validate -f -` does with ``text`` (in process: the same two calls), as
    (problems, warnings) lines."""
    from lorarl.admission import manifests
    from lorarl.admission.validation import validate

    try:
        docs = list(manifests.documents(text, "-"))
    except manifests.ManifestError as err:
        return [str(err)], []
    problems = [f"{p.field}: {p.message}" for d in docs for p in validate(d.body)[1]]
    return problems, [w for d in docs for w in d.warnings]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_validate_reads_yaml_as_kubectl_does(control_plane, namespace, case):
    _, text, accepted, field = case
    problems, _ = read_and_validate(text)
    theirs = kubectl_dry_run(control_plane, namespace, text)
    assert (theirs.returncode == 0) == accepted, theirs.stderr  # the oracle says what the case is
    assert (not problems) == accepted, (problems, theirs.stderr)
    if field:
        assert field in theirs.stderr, theirs.stderr
        assert any(p.startswith(f"{field}:") or p.startswith(f"{field}.") for p in problems), problems


def test_the_values_are_kubectls(control_plane, namespace):
    """Not only the verdict: the job lorarl renders carries the values the server stored."""
    text = job_text(spec="\n  optimizer:\n    lr: 2e-5\n    lr: 3e-5\n  lora:\n    rank: 0o20\n    alpha: 1e2\n  suspend: y")
    stored = json.loads(kubectl_dry_run(control_plane, namespace, text).stdout)["spec"]
    assert (stored["optimizer"]["lr"], stored["lora"]["rank"], stored["lora"]["alpha"], stored["suspend"]) == (3e-05, 16, 100, True)
    out = lorarl("render", "-f", "-", "--command", stdin=text)
    assert out.exit_code == 0, out.stderr
    assert "--lr 3e-05 \\" in out.stdout and "--lora-rank 16 \\" in out.stdout and "--lora-alpha 100 \\" in out.stdout
    assert "'lr' is given twice; the last value counts" in out.stderr
    rayjob = json.loads(lorarl("render", "-f", "-", "-o", "json", "--only", "RayJob", stdin=text).stdout)["items"][0]
    assert rayjob["spec"]["suspend"] is True


def test_owned_flag_refusal_is_the_servers_message(control_plane, namespace):
    text = job_text(spec='\n  extraArgs: ["--lora-rank=8"]')
    theirs = kubectl_dry_run(control_plane, namespace, text).stderr
    ours = " ".join(read_and_validate(text)[0])
    message = "--lora-rank is set by spec.lora.rank: change that instead of overriding it in extraArgs"
    assert message in theirs and message in ours, (theirs, ours)


def _names(text: str) -> list[str]:
    return re.findall(r"lorarljob\.lorarl\.dev/(\S+)", text)


@pytest.mark.parametrize("recursive", [False, True], ids=["dir", "dir-R"])
def test_files_of_a_directory_are_kubectls(control_plane, namespace, tmp_path, recursive):
    """-f DIR reads the .json/.yaml/.yml files of DIR (and with -R its subdirectories) in
    kubectl's order; other files are left out."""
    root = tmp_path / "jobs"
    for rel, name in [("b.yaml", "b"), ("a.yml", "a"), ("c/d.yaml", "d"), ("e.json", "e"), ("notes.txt", "txt"), ("c/deeper/f.yaml", "f")]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = job_text(name=name)
        path.write_text(json.dumps(_load(text)) if rel.endswith(".json") else text)
    flags = ["-R"] if recursive else []
    theirs = control_plane.kubectl("create", "--dry-run=client", "-o", "name", "-n", namespace, "-f", str(root), *flags).stdout
    ours = lorarl("validate", "-f", str(root), *flags)
    assert ours.exit_code == 0, ours.stderr
    ours_names = re.findall(r"\((\S+)\): valid", ours.stdout)
    assert ours_names == _names(theirs), (ours.stdout, theirs)
    assert ("d" in ours_names) == recursive and "txt" not in ours_names
    # a file named explicitly is read whatever its name, as kubectl does
    txt = str(root / "notes.txt")
    assert _names(control_plane.kubectl("create", "--dry-run=client", "-o", "name", "-n", namespace, "-f", txt).stdout) == ["txt"]
    assert lorarl("validate", "-f", txt).exit_code == 0


def _load(text: str) -> dict:
    import yaml

    return yaml.safe_load(text)


def test_the_repository_manifests_directory_validates():
    """`lorarl validate -f manifests/` (the issue's "Is a directory")."""
    out = lorarl("validate", "-f", str(pathlib.Path(__file__).parents[2] / "manifests"))
    assert out.exit_code == 0, out.stderr
    assert out.stdout.count(": valid") == 4, out.stdout
