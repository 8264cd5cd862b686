"""The reporter as a process: passthrough, exit codes, signals, and the merge patches it sends."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lorarl_dev import mileslog

from tests.reporter.reporter_testlib import CHILD, FakeApi, expected_final_status, strip_nulls, without_time

TOKEN = "s3cr3t-token-value-0123456789"
STEP0 = "[2026-11-30 08:30:00.000 MegatronTrainRayActor] model.py:660 - step 0: {'train/loss': 0.5}"


ARTIFACT = {}


@pytest.fixture(autouse=True)
def _artifact(artifact_path):
    ARTIFACT["path"] = str(artifact_path)


def run_artifact() -> list:
    """The shipped zipapp, with no site-packages: only the standard library is there."""
    return [sys.executable, "-I", "-S", ARTIFACT["path"]]


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_SERVICE", "LORARL_")) and k.lower() not in ("http_proxy", "https_proxy")}
    env.update(extra)
    return env


def reporter_cmd(*options, total=300, interval=0.2) -> list:
    return [*run_artifact(), "--namespace", "team-a", "--name", "qwen3-4b-lora", "--total-rollouts", str(total), "--interval", str(interval), *options, "--"]


def reporter_lines(stderr: bytes) -> list:
    return [line for line in stderr.decode("utf-8", "replace").splitlines() if line.startswith("[lorarl-reporter]")]


@pytest.fixture
def log_file(tmp_path, miles_log) -> Path:
    path = tmp_path / "miles.log"
    path.write_bytes(miles_log.data)
    return path


@pytest.fixture
def token_file(tmp_path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_until(stream, marker: bytes, timeout: float = 20.0) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    fd = stream.fileno()
    while marker not in data:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out waiting for {marker!r}; got {data[-300:]!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"EOF before {marker!r}; got {data[-300:]!r}"
            data += chunk
    return data


# --------------------------------------------------------------------------------------------


def test_passthrough_is_byte_identical_and_exit_code_is_preserved(log_file, miles_log):
    result = subprocess.run(reporter_cmd() + [sys.executable, "-c", CHILD, str(log_file), "3"], capture_output=True, env=clean_env(), timeout=120)
    assert result.stdout == miles_log.data
    assert result.returncode == 3
    # no API configured: one line saying so, nothing else (no warnings leaking from parsing)
    assert len(reporter_lines(result.stderr)) == 1 and b"no Kubernetes API configured" in result.stderr
    assert result.stderr.decode().count("\n") == 1


def test_unreachable_api_changes_nothing(log_file, miles_log, token_file):
    env = clean_env(LORARL_API_SERVER=f"http://127.0.0.1:{closed_port()}", LORARL_TOKEN_FILE=str(token_file))
    start = time.monotonic()
    result = subprocess.run(reporter_cmd(interval=0.05) + [sys.executable, "-c", CHILD, str(log_file), "3"], capture_output=True, env=env, timeout=120)
    assert time.monotonic() - start < 60
    assert result.stdout == miles_log.data
    assert result.returncode == 3
    lines = reporter_lines(result.stderr)
    assert 1 <= len(lines) <= 2, lines  # first failure (+ final patch not delivered), not one per attempt
    assert "failed" in lines[0] and "team-a/qwen3-4b-lora" in lines[0]
    assert TOKEN.encode() not in result.stderr + result.stdout


def test_merge_patches_sent_to_the_api(log_file, miles_log, token_file, fake_api):
    env = clean_env(LORARL_API_SERVER=fake_api.url, LORARL_TOKEN_FILE=str(token_file))
    result = subprocess.run(reporter_cmd(interval=0.5) + [sys.executable, "-c", CHILD, str(log_file), "3"], capture_output=True, env=env, timeout=120)
    assert result.stdout == miles_log.data and result.returncode == 3
    assert reporter_lines(result.stderr) == []
    patches = fake_api.patches()
    assert 2 <= len(patches) <= miles_log.num_rollouts // 10, len(patches)  # throttled
    for p in patches:
        assert p["method"] == "PATCH"
        assert p["path"] == "/apis/lorarl.dev/v1alpha1/namespaces/team-a/lorarljobs/qwen3-4b-lora/status"
        assert p["headers"]["content-type"] == "application/merge-patch+json"
        assert p["headers"]["authorization"] == f"Bearer {TOKEN}"
        assert list(p["body"]) == ["status"]
        assert set(p["body"]["status"]) <= {"progress", "metrics", "eval", "checkpoints", "history"}
    final = strip_nulls(patches[-1]["body"]["status"])
    assert without_time(final) == expected_final_status(miles_log)
    assert patches[-1]["body"]["status"]["metrics"]["kl"] is None  # last ppo_kl was nan
    rollouts = [p["body"]["status"]["progress"]["rollout"] for p in patches]
    assert rollouts == sorted(rollouts) and rollouts[0] < rollouts[-1] == miles_log.num_rollouts


def test_partial_line_is_passed_through_immediately(tmp_path, fake_api, token_file):
    go = tmp_path / "go"
    child = (
        "import os, sys, time\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'partial-no-newline'); out.flush()\n"
        f"deadline = time.time() + 30\n"
        f"while not os.path.exists({str(go)!r}) and time.time() < deadline: time.sleep(0.01)\n"
        f"out.write(b' rest\\n' + {STEP0.encode()!r} + b'\\n'); out.flush()\n"
    )
    env = clean_env(LORARL_API_SERVER=fake_api.url, LORARL_TOKEN_FILE=str(token_file))
    proc = subprocess.Popen(reporter_cmd(total=10) + [sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert read_until(proc.stdout, b"partial-no-newline") == b"partial-no-newline"
        go.touch()
        rest = proc.stdout.read()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    assert rest == b" rest\n" + STEP0.encode() + b"\n"
    final = fake_api.patches()[-1]["body"]["status"]
    assert final["progress"]["rollout"] == 1 and final["metrics"]["loss"] == 0.5


def test_stderr_is_passed_through_and_parsed(fake_api, token_file):
    child = f"import sys; sys.stderr.write({STEP0!r} + '\\n'); sys.stdout.write('out\\n'); sys.stderr.write('no newline at the end')"
    env = clean_env(LORARL_API_SERVER=fake_api.url, LORARL_TOKEN_FILE=str(token_file))
    result = subprocess.run(reporter_cmd(total=10) + [sys.executable, "-c", child], capture_output=True, env=env, timeout=60)
    assert result.returncode == 0
    assert result.stdout == b"out\n"
    assert result.stderr == STEP0.encode() + b"\nno newline at the end"
    assert fake_api.patches()[-1]["body"]["status"]["metrics"]["loss"] == 0.5


@pytest.mark.parametrize("handles, expected", [(True, 7), (False, 128 + signal.SIGTERM)])
def test_sigterm_is_forwarded_to_the_child(handles, expected):
    child = (
        "import signal, sys, time\n"
        + ("signal.signal(signal.SIGTERM, lambda *a: (print('child got SIGTERM', flush=True), sys.exit(7)))\n" if handles else "")
        + "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(reporter_cmd(total=10) + [sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
    try:
        read_until(proc.stdout, b"ready\n")
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out = proc.stdout.read()
        assert proc.wait(timeout=30) == expected
        assert time.monotonic() - start < 20
    finally:
        proc.kill()
        proc.wait()
    if handles:
        assert out == b"child got SIGTERM\n"


def test_checkpoints_from_the_save_dir(tmp_path, fake_api, token_file):
    save = tmp_path / "checkpoints"
    mileslog.write_tree(str(save), [49, 99], ranks=8)
    mileslog.write_save(str(save), 149, 8, files=9)  # shards and adapter_model.bin only
    env = clean_env(LORARL_API_SERVER=fake_api.url, LORARL_TOKEN_FILE=str(token_file))
    result = subprocess.run(
        reporter_cmd("--save-dir", str(save), "--gpus", "8", total=200) + [sys.executable, "-c", "pass"], capture_output=True, env=env, timeout=60
    )
    assert result.returncode == 0 and result.stdout == b""
    final = fake_api.patches()[-1]["body"]["status"]
    assert final["checkpoints"] == {"latestIteration": 99, "latestPath": str(save / "iter_0000099" / "adapter"), "count": 2, "saving": 149}
    assert final["progress"]["rollout"] == 100 and final["progress"]["percent"] == 50 and final["progress"]["attempts"] == 1


def test_artifact_is_deterministic_small_and_stdlib_only(artifact_path):
    from lorarl.job import artifact

    artifact.reporter_zipapp.cache_clear()
    assert artifact.reporter_zipapp() == artifact_path.read_bytes()
    assert len(artifact.reporter_zipapp()) < 256 * 1024  # the head's reporter volume is render.REPORTER_VOLUME_SIZE (8Mi)
    imports = subprocess.run([*run_artifact(), "--help"], capture_output=True, text=True, timeout=30)
    assert imports.returncode == 0 and "--total-rollouts" in imports.stdout
    names = [
        word.split()[-1]
        for word in subprocess.run(
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                "import sys; sys.path.insert(0, sys.argv[1]); import lorarl_reporter.cli; "
                "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('lorarl_reporter'))))",
                ARTIFACT["path"],
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    ]
    assert {"lorarl_reporter.cli", "lorarl_reporter.summary", "lorarl_reporter.launcher"} <= set(names)


def test_failure_then_recovery_logs_one_line_each(log_file, fake_api, token_file):
    fake_api.statuses = [500, 500, 500]
    env = clean_env(LORARL_API_SERVER=fake_api.url, LORARL_TOKEN_FILE=str(token_file))
    result = subprocess.run(reporter_cmd(interval=0.05) + [sys.executable, "-c", CHILD, str(log_file), "0"], capture_output=True, env=env, timeout=120)
    assert result.returncode == 0
    lines = reporter_lines(result.stderr)
    assert len(lines) == 2, lines
    assert "HTTP 500" in lines[0] and "injected failure" in lines[0]
    assert "recovered after 3 failed attempt(s)" in lines[1]
    assert len(fake_api.patches()) >= 4


def test_token_is_reread_for_every_patch(reporter, fake_api, token_file):
    config = reporter.ApiConfig(fake_api.url, str(token_file), "/nonexistent/ca.crt")
    patcher = reporter.Patcher(config, "ns", "job")
    status = reporter.Summary(5).status()
    assert patcher.send(status)
    token_file.write_text("rotated-token")
    assert patcher.send(status)
    token_file.unlink()
    assert patcher.send(status)
    headers = [p["headers"] for p in fake_api.patches()]
    assert headers[0]["authorization"] == f"Bearer {TOKEN}"
    assert headers[1]["authorization"] == "Bearer rotated-token"
    assert "authorization" not in headers[2]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_https_with_the_configured_ca(reporter, tmp_path, token_file):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    api = FakeApi(tls=(str(cert), str(key)))
    api.thread.start()
    try:
        status = reporter.Summary(5).status()
        trusted = reporter.Patcher(reporter.ApiConfig(api.url, str(token_file), str(cert)), "ns", "job")
        assert trusted.send(status) and trusted.failures == 0
        untrusted = reporter.Patcher(reporter.ApiConfig(api.url, str(token_file), str(tmp_path / "none")), "ns", "job")
        assert not untrusted.send(status) and untrusted.failures == 1
        assert len(api.patches()) == 1 and api.patches()[0]["headers"]["authorization"] == f"Bearer {TOKEN}"
    finally:
        api.server.shutdown()
        api.server.server_close()


def test_api_config_from_the_environment(reporter):
    assert reporter.api_config({}) is None
    c = reporter.api_config({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert c == reporter.ApiConfig(
        "https://10.96.0.1:443", "/var/run/secrets/kubernetes.io/serviceaccount/token", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )
    assert reporter.api_config({"KUBERNETES_SERVICE_HOST": "fd00::1"}).server == "https://[fd00::1]:443"
    c = reporter.api_config(
        {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "LORARL_API_SERVER": "http://127.0.0.1:1/", "LORARL_TOKEN_FILE": "/t", "LORARL_CA_FILE": "/c"}
    )
    assert c == reporter.ApiConfig("http://127.0.0.1:1", "/t", "/c")
    assert reporter.api_config({"LORARL_API_SERVER": "ftp://x"}) is None


def test_usage_errors(tmp_path):
    no_command = subprocess.run([*run_artifact(), "--namespace", "a", "--name", "b", "--total-rollouts", "1"], capture_output=True, env=clean_env(), timeout=30)
    assert no_command.returncode == 2 and b"usage:" in no_command.stderr
    missing = subprocess.run(reporter_cmd() + [str(tmp_path / "no-such-binary")], capture_output=True, env=clean_env(), timeout=30)
    assert missing.returncode == 127
    # bad reporter options must not stop the training run
    bad = subprocess.run(
        [*run_artifact(), "--total-rollouts", "many", "--", sys.executable, "-c", "print('trained'); raise SystemExit(5)"],
        capture_output=True,
        env=clean_env(),
        timeout=30,
    )
    assert bad.returncode == 5 and bad.stdout == b"trained\n"
    assert "without status reporting" in reporter_lines(bad.stderr)[0]
