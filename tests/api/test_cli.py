"""The lorarl CLI: render, validate and crd, from files and stdin, in a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from lorarl.admission import crdgen

from tests.api.quoting_chain import HEAD_SHELLS
from tests.helpers import SEED

LORARL = [sys.executable, "-m", "lorarl.cli"]


def run(*args, stdin=None):
    return subprocess.run([*LORARL, *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_render_seed_example():
    out = run("render", "-f", str(SEED))
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "PersistentVolumeClaim", "NetworkPolicy", "RayJob"]
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


def test_validate_reads_every_document_of_the_files_of_a_directory(tmp_path):
    """-f DIR with multi-document files: each LoraRLJob judged and named by file and document
    (a Secret beside them skipped); a bad one names its document and field; -R adds the
    subdirectories. (The file choice and order against the real kubectl:
    tests/api/test_yaml_differential.py.)"""
    seed = SEED.read_text()
    secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
    (tmp_path / "sub").mkdir()
    (tmp_path / "jobs.yaml").write_text(seed + "---\n" + secret + "---\n" + seed.replace("name: qwen3-4b-lora-amd\n", "name: second\n", 1))
    (tmp_path / "sub" / "bad.yml").write_text(
        "---\n" + seed.replace("name: qwen3-4b-lora-amd\n", "name: nested\n", 1).replace("accelerator: MI355X", "accelerator: MI355X\n    nodes: 0")
    )
    flat = run("validate", "-f", str(tmp_path))
    assert flat.returncode == 0, flat.stderr
    assert flat.stdout.splitlines() == [f"{tmp_path}/jobs.yaml#1 (qwen3-4b-lora-amd): valid", f"{tmp_path}/jobs.yaml#3 (second): valid"]
    deep = run("validate", "-f", str(tmp_path), "-R")
    assert deep.returncode == 1 and deep.stdout == flat.stdout, deep.stdout
    assert deep.stderr.startswith(f"{tmp_path}/sub/bad.yml#1 (nested): spec.hardware.nodes:"), deep.stderr


# ------------------------------------------------------------------- render for a person to read


def test_render_names_the_tools_image_and_ships_no_binary_data(monkeypatch):
    """The reporter comes from the tools image (--tools-image, $LORARL_TOOLS_IMAGE): no child
    carries it, so what `lorarl render` prints is the form to apply."""
    from lorarl.job import render as render_module
    from lorarl.job.settings import DEFAULT_TOOLS_IMAGE

    from tests.helpers import lorarl_cli

    def images(out):
        docs = list(yaml.safe_load_all(out.stdout))
        assert out.exit_code == 0 and not [d for d in docs if "binaryData" in d], out.stderr
        head = docs[-1]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
        by_name = {c["name"]: c["image"] for c in head["initContainers"] + head["containers"]}
        return by_name[render_module.REPORTER_INSTALL_CONTAINER], by_name[render_module.SIDECAR_CONTAINER]

    assert images(lorarl_cli("render", "-f", str(SEED))) == (DEFAULT_TOOLS_IMAGE, DEFAULT_TOOLS_IMAGE)
    assert images(lorarl_cli("render", "-f", str(SEED), "--tools-image", "reg.example/op:1")) == ("reg.example/op:1",) * 2
    monkeypatch.setenv("LORARL_TOOLS_IMAGE", "reg.example/op@sha256:" + "c" * 64)
    assert images(lorarl_cli("render", "-f", str(SEED))) == ("reg.example/op@sha256:" + "c" * 64,) * 2
    bad = lorarl_cli("render", "-f", str(SEED), "--tools-image", "two words")
    assert bad.exit_code == 2 and "--tools-image 'two words'" in bad.stderr


def test_render_json_and_only_one_kind_or_name():
    from lorarl.job import render as render_module

    from tests.helpers import job_from, load, lorarl_cli

    children = render_module.render(job_from(load(SEED)))
    out = lorarl_cli("render", "-f", str(SEED), "-o", "json")
    assert json.loads(out.stdout) == {"apiVersion": "v1", "kind": "List", "items": children}
    rayjob = lorarl_cli("render", "-f", str(SEED), "--only", "rayjob")
    assert [d["kind"] for d in yaml.safe_load_all(rayjob.stdout)] == ["RayJob"]
    by_name = lorarl_cli("render", "-f", str(SEED), "--only", "qwen3-4b-lora-amd-data")
    assert [d["kind"] for d in yaml.safe_load_all(by_name.stdout)] == ["PersistentVolumeClaim"]
    none = lorarl_cli("render", "-f", str(SEED), "--only", "Deployment")
    assert none.exit_code == 1 and "kinds: ServiceAccount, Role" in none.stderr


def test_render_command_one_flag_per_line_read_back_by_a_real_shell():
    """--command prints train.py's command as the recipe writes it: one flag (with its values)
    per line, continued with backslashes; the real sh reads it back as the exact argv."""
    from lorarl.job import command

    from tests.helpers import job_from, load, lorarl_cli

    out = lorarl_cli("render", "-f", str(SEED), "--command").stdout
    lines = out.splitlines()
    assert lines[0] == "python3 /root/miles/train.py \\"
    assert "   --lora-rank 64 \\" in lines and "   --eval-prompt-data aime24 /root/datasets/zhuzilin/aime-2024/main/aime-2024.jsonl \\" in lines
    assert all(line.startswith("   --") for line in lines[1:])
    printed = subprocess.run(
        ["sh", "-c", out.replace("python3 /root/miles/train.py", "printf '%s\\n' python3 /root/miles/train.py", 1)], capture_output=True, text=True
    )
    assert printed.stdout.splitlines() == command.train_argv(job_from(load(SEED)))


# `python3` on PATH as the pasted command meets it: train.py's argv parsed by miles' real parser
# (its dump, hack/images/job/miles/miles_standin/options.py), the namespace written as JSON
_TRAIN_PY_PARSER = """#!{python} -I
import json, sys
sys.path.insert(0, {miles!r})
from miles_standin import options
assert sys.argv[1] == "/root/miles/train.py", sys.argv[1:2]
json.dump(vars(options.parse(sys.argv[2:])), open({out!r}, "w"), sort_keys=True)
"""


@pytest.mark.parametrize("shell", HEAD_SHELLS)
def test_render_command_pasted_into_a_shell_is_what_the_rayjob_runs(tmp_path, shell):
    """The printed command, pasted as it is into a real shell, gives miles' parser the options the
    RayJob's own entrypoint gives it after the real quoting chain (KubeRay's bash, Ray's joiner,
    the head's sh): with eval datasets, W&B and extraArgs, nothing reads differently."""
    from tests.api.quoting_chain import Chain
    from tests.helpers import REPO, job_from, lorarl_cli, with_spec
    from tests.standins.standin_lib import MILES, miles_options

    doc = with_spec(
        tracking={"wandb": {"project": "p-1", "group": "g.2", "apiKeySecretRef": {"name": "w", "key": "k"}}},
        extraArgs=["--max-tokens-per-gpu", "9216", "--use-dynamic-batch-size"],
    )
    doc["spec"]["eval"] = {"datasets": [{"name": "aime24", "repo": "zhuzilin/aime-2024"}, {"name": "gsm8k", "repo": "openai/gsm8k", "file": "test/main.jsonl"}]}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    printed = lorarl_cli("render", "-f", str(tmp_path / "job.yaml"), "--command")
    assert printed.exit_code == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert all(line.endswith(" \\") for line in lines[:-1]) and all(line.startswith("   --") for line in lines[1:])  # one flag a line
    (tmp_path / "bin").mkdir()
    stub = tmp_path / "bin" / "python3"
    stub.write_text(_TRAIN_PY_PARSER.format(python=sys.executable, miles=str(MILES), out=str(tmp_path / "pasted.json")))
    stub.chmod(0o755)
    pasted = subprocess.run([shell, "-c", printed.stdout], env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}, capture_output=True, text=True, cwd=REPO)
    assert pasted.returncode == 0, pasted.stderr
    options = miles_options()
    with Chain() as chain:
        received = chain.run(render_rayjob(job_from(doc))["spec"]["entrypoint"]).argv
    train = received[received.index("--") + 1 :]
    assert train[:2] == ["python3", "/root/miles/train.py"]
    runs = json.loads(json.dumps(vars(options.parse(train[2:])), sort_keys=True))
    assert json.loads((tmp_path / "pasted.json").read_text()) == runs
    assert runs["eval_prompt_data"][-2:] == ["gsm8k", "/root/datasets/openai/gsm8k/main/test/main.jsonl"]
    assert (runs["wandb_group"], runs["max_tokens_per_gpu"], runs["use_dynamic_batch_size"]) == ("g.2", 9216, True)


def render_rayjob(job):
    from lorarl.job import render as render_module

    return next(c for c in render_module.render(job) if c["kind"] == "RayJob")


def test_the_readme_tour_runs_as_written():
    """Every `lorarl render|validate` line of the README's five-minute tour runs (from the
    repository root) and exits 0; the tour shows the new render options."""
    import shlex

    from tests.helpers import REPO, lorarl_cli

    tour = (REPO / "README.md").read_text().split("## A five-minute tour", 1)[1].split("```", 2)[1]
    lines = [
        line.split("#", 1)[0].split("|", 1)[0].strip() for line in tour.splitlines() if line.startswith("lorarl render") or line.startswith("lorarl validate")
    ]
    assert any("--command" in line for line in lines) and any("--only" in line for line in lines), lines
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        for line in lines:
            out = lorarl_cli(*shlex.split(line)[1:])
            assert out.exit_code == 0, (line, out.stderr)
    finally:
        os.chdir(cwd)


def test_validate_warns_of_the_deprecated_run_policy_ttl(tmp_path):
    doc = yaml.safe_load(SEED.read_text())
    doc["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 600}
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = run("validate", "-f", str(path))
    assert out.returncode == 0 and "valid" in out.stdout, out.stderr
    assert "runPolicy.ttlSecondsAfterFinished is deprecated" in out.stderr and "holdGpusAfterFinishSeconds" in out.stderr
    assert "deprecated" not in run("validate", "-f", str(SEED)).stderr
