"""The init container's prepare.sh, run for real by the shell the container uses (``sh``).

Only the downloader is a stand-in: ``hf`` on PATH is a stub taking ``hf download``'s arguments
(``[--repo-type dataset] REPO [--revision R] --local-dir DIR``, as prepare.sh calls it). It
writes one file, then waits for a gate file before writing the rest: a download in progress for
as long as the test needs, without timing anything.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess

import pytest
from lorarl.job import render

from tests.helpers import job_from, wait_for, with_spec

SCRIPT = render.asset_path("prepare.sh")
SHELL = "/bin/sh"  # the container runs `sh prepare.sh` (render.prepare_container)

STUB = r"""#!/bin/sh
set -eu
dir= repo= rev=
[ "$1" = download ] && shift
while [ $# -gt 0 ]; do
  case $1 in
    --local-dir) dir=$2; shift 2 ;;
    --revision) rev=$2; shift 2 ;;
    --repo-type) shift 2 ;;
    *) repo=$1; shift ;;
  esac
done
found=$(ls -A "$dir" | tr '\n' ' ')
echo "start $repo@${rev:-main} $dir [$found]" >> "$STUB_LOG"
echo "$repo@${rev:-main}" > "$dir/config.json"
while [ ! -e "$STUB_GATE" ]; do sleep 0.05; done
echo weights > "$dir/model.safetensors"
echo "done $dir" >> "$STUB_LOG"
"""


class Volume:
    """A scratch 'volume': /root/... of the rendered arguments maps to <tmp>/root/..."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        (bin_dir / "hf").write_text(STUB)
        (bin_dir / "hf").chmod(0o755)
        self.log = tmp / "stub.log"
        self.gate = tmp / "gate"
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "STUB_LOG": str(self.log),
            "STUB_GATE": str(self.gate),
            "LORARL_RUN_DIR": str(tmp / "root/shared_data/job"),
        }
        self.runs = 0

    def path(self, rendered: str) -> pathlib.Path:
        return self.tmp / rendered.lstrip("/")

    def args(self, job) -> list[str]:
        args = render.downloads(job)
        return [str(self.path(a)) if a.startswith("/root/") else a for a in args]

    def start(self, job) -> tuple[subprocess.Popen, pathlib.Path]:
        self.runs += 1
        out = self.tmp / f"run{self.runs}.out"
        proc = subprocess.Popen(
            [SHELL, str(SCRIPT), *self.args(job)],
            env=self.env,
            stdout=out.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed like a container, children too
        )
        return proc, out

    def run(self, job) -> str:
        self.gate.touch()
        proc, out = self.start(job)
        assert proc.wait(timeout=60) == 0, out.read_text()
        return out.read_text()

    def starts(self, target: pathlib.Path) -> list[str]:
        """The stub's downloads into target's in-progress directory, in order."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if line.startswith("start") and f" {target}@partial " in line]


def model_only(**model):
    """A job with the seed's model (eval off: the model and the prompt data are downloaded)."""
    return job_from(with_spec(model={"name": "Qwen/Qwen3-4B", **model}, eval={"enabled": False}))


def tree_state(root: pathlib.Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry under root with its inode, mtime and content (files): what 'unchanged' means."""
    state = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        state[str(path.relative_to(root))] = (st.st_ino, st.st_mtime_ns, path.read_bytes() if path.is_file() else b"")
    return state


@pytest.fixture
def volume(tmp_path):
    return Volume(tmp_path)


def test_two_concurrent_preparers_download_once(volume):
    job = model_only()
    target = volume.path("/root/models/Qwen/Qwen3-4B/main")
    first, first_out = volume.start(job)
    wait_for(lambda: volume.starts(target), what="the first download to start")
    second, second_out = volume.start(job)
    wait_for(lambda: "waiting for another preparer" in second_out.read_text(), what="the second preparer to wait")
    assert not target.exists()  # nothing published while the download runs
    volume.gate.touch()
    assert first.wait(timeout=60) == 0, first_out.read_text()
    assert second.wait(timeout=60) == 0, second_out.read_text()
    assert len(volume.starts(target)) == 1
    assert "already complete" in second_out.read_text()
    assert sorted(p.name for p in target.iterdir()) == [".lorarl-complete", "config.json", "model.safetensors"]
    assert (target / ".lorarl-complete").read_text() == "Qwen/Qwen3-4B@main\n"
    assert not volume.path("/root/models/Qwen/Qwen3-4B/main@partial").exists()


def test_a_killed_download_leaves_no_directory_and_the_next_run_resumes_it(volume):
    job = model_only()
    target = volume.path("/root/models/Qwen/Qwen3-4B/main")
    partial = volume.path("/root/models/Qwen/Qwen3-4B/main@partial")
    proc, _ = volume.start(job)
    wait_for(lambda: (partial / "config.json").exists(), what="the download to write its first file")
    os.killpg(proc.pid, signal.SIGKILL)  # as when the pod is deleted mid-download
    proc.wait(timeout=60)
    assert not target.exists()
    out = volume.run(job)
    assert "complete in" in out
    assert sorted(p.name for p in target.iterdir()) == [".lorarl-complete", "config.json", "model.safetensors"]
    assert not partial.exists()
    # the second download ran in the same directory and found the first one's file (hf resumes)
    first, second = volume.starts(target)
    assert first.split(" [")[0] == second.split(" [")[0]
    assert second.endswith("[config.json ]")


def test_a_complete_directory_is_never_modified(volume):
    volume.run(model_only())
    target = volume.path("/root/models/Qwen/Qwen3-4B/main")
    before = tree_state(target)
    out = volume.run(model_only(revision="main"))  # the same input, named explicitly
    assert "already complete" in out
    volume.run(model_only(revision="v2"))  # a new revision goes to a new directory
    assert tree_state(target) == before
    assert (volume.path("/root/models/Qwen/Qwen3-4B/v2") / ".lorarl-complete").read_text() == "Qwen/Qwen3-4B@v2\n"
    assert len(volume.starts(target)) == 1


def test_same_name_in_two_organisations_downloads_twice_into_two_directories(volume):
    first = job_from(with_spec(rollout={"promptData": {"repo": "org1/math"}}, eval={"enabled": False}))
    second = job_from(with_spec(rollout={"promptData": {"repo": "org2/math"}}, eval={"enabled": False}))
    volume.run(first)
    org1 = volume.path("/root/datasets/org1/math/main")
    before = tree_state(org1)
    volume.run(second)
    assert tree_state(org1) == before
    assert (volume.path("/root/datasets/org2/math/main") / ".lorarl-complete").read_text() == "org2/math@main\n"


def test_a_directory_not_made_by_prepare_is_left_alone(volume):
    target = volume.path("/root/models/Qwen/Qwen3-4B/main")
    target.mkdir(parents=True)
    (target / "config.json").write_text("placed by hand")
    before = tree_state(target)
    volume.gate.touch()
    proc, out = volume.start(model_only())
    assert proc.wait(timeout=60) == 3
    assert "is not a complete download" in out.read_text()
    assert tree_state(target) == before
    assert volume.starts(target) == []


def test_an_image_without_flock_fails_naming_the_field(volume, tmp_path):
    bare = tmp_path / "bare"  # every tool prepare.sh uses, except flock
    bare.mkdir()
    for tool in ("mkdir", "dirname", "mv", "ls", "tr", "sleep"):
        (bare / tool).symlink_to(shutil.which(tool))
    (bare / "hf").symlink_to(tmp_path / "bin" / "hf")
    result = subprocess.run([SHELL, str(SCRIPT), *volume.args(model_only())], env={**volume.env, "PATH": str(bare)}, capture_output=True, text=True)
    assert result.returncode == 2
    assert "flock" in result.stderr and "spec.dataPrep.image" in result.stderr
    assert volume.starts(volume.path("/root/models/Qwen/Qwen3-4B/main")) == []


def test_a_failed_download_leaves_a_one_line_termination_message_naming_the_input(volume, tmp_path):
    """The kubelet copies the termination message into the pod's status (terminationMessagePath):
    the operator reports it without log access (lorarl.control.pods)."""
    (tmp_path / "bin" / "hf").write_text("#!/bin/sh\necho 'hf: 404 Client Error: Entry Not Found' >&2\nexit 1\n")
    termination_log = tmp_path / "termination-log"
    result = subprocess.run(
        [SHELL, str(SCRIPT), *volume.args(model_only())],
        env={**volume.env, "LORARL_TERMINATION_LOG": str(termination_log)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 4, result.stderr
    assert termination_log.read_text() == "could not download model Qwen/Qwen3-4B@main (hf download exited 1; its output is in the log of container prepare)\n"
    assert "404 Client Error" in result.stderr  # hf's own words stay in the log
    assert not volume.path("/root/models/Qwen/Qwen3-4B/main").exists()
