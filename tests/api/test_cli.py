"""The lorarl CLI: render, validate and crd, from files and stdin, in a real subprocess."""

from __future__ import annotations

import subprocess
import sys

import yaml
from lorarl.admission import crdgen

from tests.helpers import SEED

LORARL = [sys.executable, "-m", "lorarl.cli"]


def run(*args, stdin=None):
    return subprocess.run([*LORARL, *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_render_seed_example():
    out = run("render", "-f", str(SEED))
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "PersistentVolumeClaim", "RayJob"]
    rayjob = docs[-1]
    assert "amd.com/gpu" in rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]


def test_render_from_stdin_equals_file():
    assert run("render", "-f", "-", stdin=SEED.read_text()).stdout == run("render", "-f", str(SEED)).stdout


def test_render_namespace_flag():
    docs = list(yaml.safe_load_all(run("render", "-f", str(SEED), "-n", "team-a").stdout))
    assert {d["metadata"]["namespace"] for d in docs} == {"team-a"}


def test_validate_ok_and_failures():
    assert run("validate", "-f", str(SEED)).returncode == 0
    bad = SEED.read_text().replace("accelerator: MI355X", "accelerator: MI355X\n    gpusPerNode: 3")
    out = run("validate", "-f", "-", stdin=bad)
    assert out.returncode == 1
    assert "spec.rollout.globalBatchSize" in out.stderr


def test_invalid_yaml_and_missing_job():
    out = run("validate", "-f", "-", stdin="a: [")
    assert out.returncode == 1 and "not valid YAML" in out.stderr
    out = run("render", "-f", "-", stdin="apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n")
    assert out.returncode == 1 and "no LoraRLJob" in out.stderr


def test_render_refuses_invalid_job_without_output():
    out = run("render", "-f", "-", stdin=SEED.read_text().replace("MI355X", "MI999X"))
    assert out.returncode == 1 and out.stdout == "" and "spec.hardware.accelerator" in out.stderr


def test_crd_command_prints_generated_crd():
    assert run("crd").stdout == crdgen.crd_yaml()


def test_validate_never_prints_a_traceback():
    """Hostile documents get a field-named message and exit 1, never a Python traceback."""
    seed = SEED.read_text()
    hostile = [
        seed.replace("name: qwen3-4b-lora-amd", "name: x", 1).replace("metadata:\n  name: x", "metadata: just-a-string"),
        seed + "\n---\n" + seed.replace("accelerator: MI355X", "accelerator: MI355X\n    nodes: 99999999999999999999999"),
        seed.replace("accelerator: MI355X", "accelerator: [MI355X]"),
        "apiVersion: lorarl.dev/v1alpha1\nkind: LoraRLJob\nmetadata: {name: x}\nspec: 5\n",
        "apiVersion: lorarl.dev/v1alpha1\nkind: LoraRLJob\nmetadata: {name: x}\nspec: {model: null, hardware: {accelerator: MI355X}}\n",
        "- a list\n- not a job\n",
    ]
    for text in hostile:
        out = run("validate", "-f", "-", stdin=text)
        assert out.returncode == 1, (text, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr and out.stderr.strip(), out.stderr
    assert "metadata: must be of type object" in run("validate", "-f", "-", stdin=hostile[0]).stderr
    assert "spec.hardware.nodes" in run("validate", "-f", "-", stdin=hostile[1]).stderr
