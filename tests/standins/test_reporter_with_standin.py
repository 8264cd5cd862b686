"""The rendered entrypoint end to end minus Kubernetes: the real in-job reporter (the zipapp the
ConfigMap ships) runs the trainer stand-in with the seed's flags, reports to a fake API server,
and on the second attempt resumes from the newest complete save as it would after a KubeRay
retry (attempt 1 is made to fail at rollout 60 by a knob that fires once)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from lorarl.job import command

from tests.helpers import job_from, seed_doc
from tests.reporter.reporter_testlib import FakeApi, write_artifact
from tests.standins.standin_lib import TRAIN_PY, events, mapped, of_kind, seed_inputs


def entrypoint(tmp: pathlib.Path, artifact: pathlib.Path) -> list[str]:
    argv = command.entrypoint_argv(job_from(seed_doc()))
    assert argv[:2] == ["python3", "/opt/lorarl/reporter.pyz"]
    split = argv.index("--")
    assert argv[split + 1 : split + 3] == ["python3", "/root/miles/train.py"]
    return [
        sys.executable,
        "-I",
        "-S",
        str(artifact),
        *mapped(argv[2:split], tmp),
        "--interval",
        "0.2",
        "--",
        sys.executable,
        str(TRAIN_PY),
        *mapped(argv[split + 3 :], tmp),
    ]


def test_reporter_resumes_the_standin_after_a_failed_attempt(tmp_path):
    seed_inputs(tmp_path, knobs={"seconds_per_rollout": 0, "exit_at_rollout": {"rollout": 60, "times": 1}})
    cmd = entrypoint(tmp_path, write_artifact(tmp_path))
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    api = FakeApi()
    api.thread.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_SERVICE", "LORARL_"))}
    env.update(LORARL_API_SERVER=api.url, LORARL_TOKEN_FILE=str(token), MILES_STANDIN_EXECUTOR="inline")
    try:
        first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert first.returncode == 1, first.stderr[-3000:]
        assert [e.id for e in of_kind(events(first.stderr), "saving")] == [49] * 8
        after_first = api.patches()[-1]["body"]["status"]
        assert after_first["progress"]["rollout"] == 60 and after_first["checkpoints"]["latestIteration"] == 49

        second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert second.returncode == 0, second.stderr[-3000:]
        evs = events(second.stderr)
        assert [e.id for e in of_kind(evs, "resumed")] == [49] * 8  # the stand-in restored iter_0000049
        assert [e.id for e in of_kind(evs, "rollout")] == list(range(50))  # --num-rollout 100 - 50, ids from 0
        save = tmp_path / "root/shared_data/qwen3-4b-lora-amd/checkpoints"
        assert (save / "attempt-002/iter_0000049/adapter/training_state_rank7.pt").is_file()
        final = api.patches()[-1]["body"]["status"]
        assert final["progress"]["rollout"] == 100 and final["progress"]["attempts"] == 2
        assert final["checkpoints"]["latestIteration"] == 99
        assert final["checkpoints"]["latestPath"] == str(save / "attempt-002/iter_0000049/adapter")
        assert 0.0 <= final["metrics"]["rawReward"] <= 1.0
        assert final["progress"]["trainedRollouts"] == 60 + 50  # attempt 1 trained 0..59, attempt 2 50..99
        assert "gpuHours" not in final["progress"]  # the operator's, from the pods
        assert 0.005 < final["metrics"]["trainRolloutLogprobAbsDiffMean"] < 0.02
        [aime] = final["eval"]
        assert aime["name"] == "aime24" and aime["latestRollout"] == 89  # local eval 39 of attempt 2, offset 50
    finally:
        api.server.shutdown()
        api.server.server_close()
