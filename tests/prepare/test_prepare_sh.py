"""The init container's prepare.sh, run for real by the shell the container uses (``sh``).

Only the downloader is a stand-in: ``hf`` on PATH is a stub taking ``hf download``'s arguments
(``[--repo-type dataset] [--revision=R] --local-dir DIR -- REPO``, as prepare.sh calls it). It
writes one file, then waits for a gate file before writing the rest: a download in progress for
as long as the test needs, without timing anything.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys

import pytest
from lorarl.job import render
from lorarl_dev import moto

from tests.helpers import job_from, wait_for, with_spec

# starts an HTTPS server and an S3 server (moto) in a venv of its own: the api tier (tests/conftest.py)
pytestmark = pytest.mark.servers

SCRIPT = render.asset_path("prepare.sh")
SHELL = "/bin/sh"  # the container runs `sh prepare.sh` (render.prepare_container)

STUB = r"""#!/bin/sh
set -eu
dir= repo= rev=
[ "$1" = download ] && shift
# hf's option grammar (click): --opt VALUE or --opt=VALUE, "--" ends the options, any other
# word starting with "-" is an option, and an unknown one is refused with exit status 2
while [ $# -gt 0 ]; do
  case $1 in
    --local-dir) dir=$2; shift 2 ;;
    --revision) rev=$2; shift 2 ;;
    --revision=*) rev=${1#--revision=}; shift ;;
    --repo-type) shift 2 ;;
    --) shift; repo=$1; shift ;;
    -*) echo "Error: No such option: $1" >&2; exit 2 ;;
    *) repo=$1; shift ;;
  esac
done
echo "argv $repo ${rev:-main}" >> "$STUB_LOG"
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


# ---------------------------------------------------------------- values that look like options


def test_a_revision_reaches_hf_as_a_value_never_as_an_option(volume):
    """The API refuses a revision starting with '-' (a CEL rule naming the field); behind it,
    prepare.sh passes a revision as --revision=R and the repository after "--", so even a job
    admitted without that rule cannot make hf read one as an option."""
    from lorarl.admission.validation import validate

    _, problems = validate(with_spec(model={"name": "Qwen/Qwen3-4B", "revision": "--help"}))
    assert [p.field for p in problems] == ["spec.model.revision"], problems
    job = model_only(revision="v1.0-rc=1")
    volume.run(job)
    assert "argv Qwen/Qwen3-4B v1.0-rc=1" in volume.log.read_text()
    job.spec.model.revision = "--help"  # past admission (an older CRD): the script still holds
    volume.run(job)
    assert "argv Qwen/Qwen3-4B --help" in volume.log.read_text()
    assert (volume.path("/root/models/Qwen/Qwen3-4B/--help") / ".lorarl-complete").exists()


# -------------------------------------------------------------------- inputs from where they live


def test_a_path_on_the_volume_is_checked_not_downloaded_and_each_input_on_its_own(volume):
    """A dataset on the volume (spec.rollout.promptData.path) is used where it is, while the
    model still comes from the Hub: each input skipped on its own (dataPrep.skip skips all)."""
    job = job_from(with_spec(rollout={"promptData": {"path": "own/prompts.jsonl"}}, eval={"enabled": False}))
    assert "--prompt-data /root/datasets/own/prompts.jsonl" in " ".join(render.rayjob(job)["spec"]["entrypoint"].split())
    proc, out = volume.start(job)
    volume.gate.touch()
    assert proc.wait(timeout=60) == 3  # not placed yet: fails naming the field, after the model
    assert "spec.model.path or a dataset's path" in out.read_text()
    placed = volume.path("/root/datasets/own/prompts.jsonl")
    placed.parent.mkdir(parents=True)
    placed.write_text('{"prompt": "1+1", "label": "2"}\n')
    before = tree_state(placed.parent)
    out = volume.run(job)
    assert "is on the volume, nothing to download" in out
    assert tree_state(placed.parent) == before
    assert len(volume.starts(volume.path("/root/models/Qwen/Qwen3-4B/main"))) == 1  # the model came from the Hub, once


class _Files(__import__("http.server").server.SimpleHTTPRequestHandler):
    """Serves a directory; with a token set, only to requests bearing it."""

    token: str | None = None

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.token and self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_error(401, "Unauthorized")
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def https_server(tmp_path):
    """An HTTPS server on 127.0.0.1 with a certificate of a CA made here (SSL_CERT_FILE trusts it)."""
    import functools
    import http.server
    import ssl
    import threading

    from lorarl_dev.certs import TinyCA

    ca = TinyCA()
    crt, key = ca.serving_cert("files", ["127.0.0.1"]).write(tmp_path, "files")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    served = tmp_path / "served"
    served.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Files, directory=str(served)))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served, f"https://127.0.0.1:{server.server_address[1]}", tmp_path / "ca.crt"
    server.shutdown()


def test_an_https_input_is_fetched_with_the_token_from_its_secret(volume, https_server):
    served, base, ca = https_server
    (served / "data").mkdir()
    (served / "data" / "prompts.jsonl").write_text('{"prompt": "2+2", "label": "4"}\n')
    _Files.token = "s3cr3t-token"
    try:
        job = job_from(
            with_spec(
                rollout={"promptData": {"uri": f"{base}/data/prompts.jsonl"}},
                eval={"enabled": False},
                dataPrep={"httpTokenSecretRef": {"name": "files", "key": "token"}},
            )
        )
        env = render.prepare_container(job)["env"]
        assert {"name": "LORARL_HTTP_TOKEN", "valueFrom": {"secretKeyRef": {"name": "files", "key": "token"}}} in env
        assert "s3cr3t" not in render.to_yaml(render.render(job))  # the spec names the Secret only
        file = render.paths.dataset_file(job.spec.rollout.prompt_data)
        assert f"--prompt-data {file}" in " ".join(render.rayjob(job)["spec"]["entrypoint"].split())
        volume.env["SSL_CERT_FILE"] = str(ca)
        volume.env["LORARL_HTTP_TOKEN"] = "wrong"  # what the kubelet would put there from a wrong Secret
        proc, out = volume.start(job)
        volume.gate.touch()
        assert proc.wait(timeout=60) != 0
        assert "HTTP 401" in out.read_text() and "httpTokenSecretRef" in out.read_text() and "wrong" not in out.read_text()
        volume.env["LORARL_HTTP_TOKEN"] = "s3cr3t-token"
        out = volume.run(job)
        assert volume.path(file).read_text() == '{"prompt": "2+2", "label": "4"}\n'
        assert (volume.path(file).parent / ".lorarl-complete").exists()
        assert "s3cr3t" not in out
    finally:
        _Files.token = None


@pytest.fixture(scope="module")
def moto_python():
    return moto.python()


@pytest.fixture
def s3_server(tmp_path):
    """moto's S3 server on a loopback port, with a bucket of model files and one of data."""
    seed = """
s3.create_bucket(Bucket="models")
s3.create_bucket(Bucket="data")
s3.put_object(Bucket="models", Key="qwen/sft/config.json", Body=b"{}")
s3.put_object(Bucket="models", Key="qwen/sft/shards/model-1.safetensors", Body=b"weights")
s3.put_object(Bucket="models", Key="other/config.json", Body=b"not this one")
s3.put_object(Bucket="data", Key="rl/prompts.jsonl", Body=b'{"prompt": "3+3", "label": "6"}\\n')
"""
    with moto.server(tmp_path / "moto.log", seed) as served:
        yield served


def test_s3_inputs_are_fetched_with_credentials_from_the_secret(volume, s3_server, moto_python, tmp_path):
    """A model directory from an s3:// prefix and a dataset from an s3:// object, through the
    real prepare.sh and fetch.py against a real S3 implementation; the keys come from the
    Secret (secretKeyRef), never from the spec."""
    endpoint, creds = s3_server
    job = job_from(
        with_spec(
            model={"name": "Qwen/Qwen3-4B", "uri": "s3://models/qwen/sft/"},
            rollout={"promptData": {"uri": "s3://data/rl/prompts.jsonl"}},
            eval={"enabled": False},
            dataPrep={"s3": {"endpoint": endpoint, "credentialsSecretName": "s3-keys"}},
        )
    )
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in render.prepare_container(job)["env"]}
    assert env["AWS_ENDPOINT_URL"] == endpoint and env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "s3-keys", "key": "AWS_SECRET_ACCESS_KEY"}}
    # the kubelet's part: the Secret's values in the environment; python3 is one with botocore
    volume.env.update(creds, PATH=f"{volume.tmp / 'bin'}:{moto_python.parent}:{os.environ['PATH']}")
    model = volume.path(render.paths.model_dir(job))
    volume.run(job)
    assert sorted(str(p.relative_to(model)) for p in model.rglob("*") if p.is_file()) == [".lorarl-complete", "config.json", "shards/model-1.safetensors"]
    prompts = volume.path(render.paths.dataset_file(job.spec.rollout.prompt_data))
    assert prompts.read_text() == '{"prompt": "3+3", "label": "6"}\n'
    entrypoint = " ".join(render.rayjob(job)["spec"]["entrypoint"].split())
    assert (
        f"--hf-checkpoint {render.paths.model_dir(job)} " in entrypoint
        and f"--prompt-data {render.paths.dataset_file(job.spec.rollout.prompt_data)} " in entrypoint
    )


def test_an_s3_input_without_botocore_fails_naming_the_image_field(volume, tmp_path):
    bare = tmp_path / "nobotocore"
    bare.mkdir()
    (bare / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')  # this venv's python: no botocore
    (bare / "python3").chmod(0o755)
    job = job_from(with_spec(rollout={"promptData": {"uri": "s3://data/rl/prompts.jsonl"}}, eval={"enabled": False}))
    volume.env["PATH"] = f"{volume.tmp / 'bin'}:{bare}:{os.environ['PATH']}"
    proc, out = volume.start(job)
    volume.gate.touch()
    assert proc.wait(timeout=60) != 0
    assert "need botocore" in out.read_text() and "spec.dataPrep.image" in out.read_text()


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
