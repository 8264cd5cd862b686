"""The real path of a RayJob's entrypoint to the trainer's argv, run with the real shells.

No model of any shell or quoting rule: each step is the program (or the standard-library
function) the real components run, in the order they run it.

1. KubeRay v1.5.0, K8sJobMode: ``common.BuildJobSubmitCommand``
   (ray-operator/controllers/ray/common/job.go:85-199) builds the word list
   ``if ! ray job status --address <url> <id> >/dev/null 2>&1 ; then ray job submit --address <url>
   --no-wait --runtime-env-json <strconv.Quote(json)> --submission-id <id> -- <entrypoint> ; fi ;
   ray job logs --address <url> --follow <id>`` (the entrypoint ``strings.TrimSpace``d, line 109;
   the runtime env is ``runtimeEnvYAML`` converted to JSON, lines 47-61, quoted with Go's
   ``strconv.Quote``, line 164); ``configureSubmitterContainer``
   (controllers/ray/rayjob_controller.go:576-588) joins it with single spaces and runs it as
   ``/bin/bash -ce -- <text>`` (``utils.GetContainerCommand``, controllers/ray/utils/util.go:829-837).
   Here: the same text, built by the same rules, run by the real ``/bin/bash -ce --``. Go's
   ``strconv.Quote`` is reproduced for the JSON only (``json.dumps`` with ``ensure_ascii=False``
   then Go's escapes; the runtime env holds ASCII only).
2. ``ray job submit`` (ray python/ray/dashboard/modules/job/cli.py, ``submit``): click collects the
   words after ``--`` (``@click.argument("entrypoint", nargs=-1, type=click.UNPROCESSED)``) and
   joins them with ``subprocess.list2cmdline`` (Ray before PR ray-project/ray#63797, 2026-06) or
   ``shlex.join`` (after it, on every platform but Windows). Here: a ``ray`` executable on
   ``PATH`` that takes its argv from bash exactly as click would after ``--`` and calls the same
   standard-library function (``JOINERS``).
3. Ray's ``JobSupervisor._exec_entrypoint`` (python/ray/dashboard/modules/job/job_supervisor.py)
   runs ``subprocess.Popen(entrypoint, shell=True, ...)``: ``/bin/sh -c <text>`` on the head
   (dash on Debian/Ubuntu images, bash on others: both are run here).
4. The first word of our entrypoint is ``python3``: a ``python3`` on ``PATH`` that writes its
   arguments, NUL-separated, to a file stands in for the interpreter. What it receives is the
   argv the in-job reporter (and after its ``--``, train.py) gets.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import yaml

JOINERS = ("list2cmdline", "shlex.join")
HEAD_SHELLS = tuple(s for s in ("/bin/sh", shutil.which("dash"), shutil.which("bash")) if s)

DASHBOARD = "http://lorarl-demo-raycluster-abcde-head-svc.ns.svc.cluster.local:8265"
SUBMISSION_ID = "lorarl-demo-x7k2p"

_RAY_STUB = """#!{python} -IS
# `ray` as the submitter and the head run it (tests/api/quoting_chain.py, steps 2 and 3)
import json, os, shlex, subprocess, sys
argv = sys.argv[1:]
if argv[:2] == ["job", "status"]:
    sys.exit(1)  # no such job yet: the submitter goes on to submit it
if argv[:2] == ["job", "logs"]:
    sys.exit(0)
assert argv[:2] == ["job", "submit"], argv
out = os.environ["CHAIN_OUT"]
with open(os.path.join(out, "submit.json"), "w") as f:
    json.dump(argv, f)
words = argv[argv.index("--") + 1:]  # click: nargs=-1 after "--"
text = subprocess.list2cmdline(words) if os.environ["CHAIN_JOINER"] == "list2cmdline" else shlex.join(words)
with open(os.path.join(out, "entrypoint.txt"), "w") as f:
    f.write(text)
sys.exit(subprocess.Popen(text, shell=True, executable=os.environ["CHAIN_HEAD_SHELL"]).wait())
"""

_PYTHON3_STUB = """#!/bin/sh
# the interpreter the head would start: records the arguments it got (tests/api/quoting_chain.py, step 4)
: > "$CHAIN_OUT/argv"
for word in "$@"; do printf '%s\\0' "$word" >> "$CHAIN_OUT/argv"; done
"""


def go_quote(text: str) -> str:
    """Go's strconv.Quote for printable ASCII/Unicode text (what KubeRay applies to the runtime
    env JSON): double quotes, with backslash, double quote and control characters escaped."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def submitter_script(entrypoint: str, runtime_env_yaml: str | None) -> str:
    """The text KubeRay's submitter runs with ``/bin/bash -ce --`` (job.go:119-196)."""
    words = ["if", "!", "ray", "job", "status", "--address", DASHBOARD, SUBMISSION_ID, ">/dev/null", "2>&1", ";", "then"]
    words += ["ray", "job", "submit", "--address", DASHBOARD, "--no-wait"]
    if runtime_env_yaml:
        runtime_env_json = json.dumps(yaml.safe_load(runtime_env_yaml), separators=(",", ":"), sort_keys=True)
        words += ["--runtime-env-json", go_quote(runtime_env_json)]
    words += ["--submission-id", SUBMISSION_ID]
    words += ["--", entrypoint.strip(), ";", "fi", ";", "ray", "job", "logs", "--address", DASHBOARD, "--follow", SUBMISSION_ID]
    return " ".join(words)


@dataclass
class Run:
    argv: list[str]  # what `python3` on the head received (its arguments)
    submit_argv: list[str]  # what `ray` received in the submitter, after `ray`
    head_text: str  # the string Ray's job supervisor ran with shell=True
    stderr: str  # the shells' complaints (a syntax error leaves argv empty)


class Chain:
    """A directory with the `ray` and `python3` executables; ``run`` sends an entrypoint through."""

    def __init__(self) -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="lorarl-chain-"))
        self.bin = self.dir / "bin"
        self.bin.mkdir()
        (self.bin / "ray").write_text(_RAY_STUB.format(python=sys.executable))
        (self.bin / "python3").write_text(_PYTHON3_STUB)
        for stub in ("ray", "python3"):
            (self.bin / stub).chmod(0o755)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Chain:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, entrypoint: str, runtime_env_yaml: str | None = None, joiner: str = "list2cmdline", head_shell: str = "/bin/sh") -> Run:
        out = pathlib.Path(tempfile.mkdtemp(dir=self.dir))
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(out),
            "CHAIN_OUT": str(out),
            "CHAIN_JOINER": joiner,
            "CHAIN_HEAD_SHELL": head_shell,
            "LC_ALL": "C.UTF-8",
        }
        # the submitter's own environment has a PYTHONPATH of its own (set by the image)
        env["PYTHONPATH"] = "/submitter/site-packages"
        done = subprocess.run(
            ["/bin/bash", "-ce", "--", submitter_script(entrypoint, runtime_env_yaml)],
            env=env,
            cwd=out,
            capture_output=True,
            timeout=60,
        )
        argv_file = out / "argv"
        argv = argv_file.read_bytes().decode().split("\0")[:-1] if argv_file.exists() else []
        submit = json.loads((out / "submit.json").read_text()) if (out / "submit.json").exists() else []
        head = (out / "entrypoint.txt").read_text() if (out / "entrypoint.txt").exists() else ""
        shutil.rmtree(out, ignore_errors=True)
        return Run(argv, submit, head, done.stderr.decode(errors="replace")[-2000:])


def runtime_env_json_given_to_ray(run: Run) -> dict:
    """The --runtime-env-json value `ray job submit` received, decoded."""
    return json.loads(run.submit_argv[run.submit_argv.index("--runtime-env-json") + 1])


def every_variant():
    """(joiner, head shell) pairs: both Ray quoting eras on every shell found here."""
    return [(j, s) for j in JOINERS for s in HEAD_SHELLS]


if __name__ == "__main__":  # manual: python -m tests.api.quoting_chain 'python3 a "b c"'
    with Chain() as chain:
        for joiner, shell in every_variant():
            print(joiner, shell, chain.run(sys.argv[1]).argv, file=sys.stdout)
    os._exit(0)
