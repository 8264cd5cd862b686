"""The reporter split in two processes, as the head pod runs it (issue 19, finding 7): the one next
to the trainer has no API server and no token, only the spool directory; the sidecar has the
token and the spool. Both are the shipped zipapp with no site-packages; the API server is the
recording stand-in, which sees what a real one would receive."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.reporter.reporter_testlib import CHILD, expected_final_status, strip_nulls, without_time

TOKEN = "s3cr3t-token-value-0123456789"


@pytest.fixture
def log_file(tmp_path, miles_log):
    path = tmp_path / "miles.log"
    path.write_bytes(miles_log.data)
    return path


def env_without_api(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_SERVICE", "LORARL_")) and k.lower() not in ("http_proxy", "https_proxy")}
    env.update(extra)
    return env


def test_the_trainer_side_spools_and_the_sidecar_sends(tmp_path, artifact_path, log_file, miles_log, fake_api):
    spool, token = tmp_path / "spool", tmp_path / "token"
    spool.mkdir()
    token.write_text(TOKEN)
    zipapp = [sys.executable, "-I", "-S", str(artifact_path)]
    sidecar = subprocess.Popen(
        [*zipapp, "sidecar", "--namespace", "team-a", "--name", "qwen3-4b-lora", "--spool", str(spool), "--poll", "0.05"],
        env=env_without_api(LORARL_API_SERVER=fake_api.url, LORARL_TOKEN_FILE=str(token)),
        stderr=subprocess.PIPE,
    )
    try:
        # the trainer's side: no API server, no token file in its environment
        result = subprocess.run(
            [*zipapp, "--namespace", "team-a", "--name", "qwen3-4b-lora", "--total-rollouts", "300", "--interval", "0.2", "--"]
            + [sys.executable, "-c", CHILD, str(log_file), "0"],
            env=env_without_api(LORARL_STATUS_SPOOL=str(spool)),
            capture_output=True,
            timeout=120,
        )
        assert result.returncode == 0 and result.stdout == miles_log.data
        assert b"[lorarl-reporter]" not in result.stderr, result.stderr  # the final report was sent (the sidecar said so)
        patches = fake_api.patches()
        assert patches and all(p["headers"]["authorization"] == f"Bearer {TOKEN}" for p in patches)
        assert all(p["path"] == "/apis/lorarl.dev/v1alpha1/namespaces/team-a/lorarljobs/qwen3-4b-lora/status" for p in patches)
        assert without_time(strip_nulls(patches[-1]["body"]["status"])) == expected_final_status(miles_log)
        assert json.loads((spool / "status.json").read_text())["seq"] == int((spool / "sent").read_text())
    finally:
        sidecar.send_signal(signal.SIGTERM)
        _, err = sidecar.communicate(timeout=30)
    assert sidecar.returncode == 0, err
    assert TOKEN.encode() not in err


def test_the_sidecar_sends_only_the_reporter_keys_of_a_spooled_status(tmp_path, fake_api):
    from lorarl.reporter import kubeapi, spool

    (tmp_path / "status.json").write_text(json.dumps({"seq": 3, "status": {"phase": "Succeeded", "progress": {"rollout": 5}}}))
    token = tmp_path / "token"
    token.write_text(TOKEN)
    patcher = kubeapi.Patcher(kubeapi.ApiConfig(fake_api.url, str(token), ""), "team-a", "qwen3-4b-lora")
    stop = __import__("threading").Event()
    stop.set()  # one pass
    assert spool.forward(str(tmp_path), patcher, stop) == 3
    (body,) = [p["body"] for p in fake_api.patches()]
    assert set(body["status"]) <= set(kubeapi.OWNED_FIELDS) and "phase" not in body["status"]
    # not of the spool's shape, or too large: nothing sent
    for bad in ('{"seq": "4", "status": {}}', "[]", json.dumps({"seq": 5, "status": {"x": "y" * spool.MAX_BYTES}})):
        (tmp_path / "status.json").write_text(bad)
        assert spool.forward(str(tmp_path), patcher, stop) == 3
    assert len(fake_api.patches()) == 1
