"""The trainer stand-in in a real Ray cluster (skipped where ray is not importable; the end-to-end
run in the job image exercises it under KubeRay): its actors and tasks take GPUs from a head that
advertises them, and their lines reach the driver with Ray's own prefix."""

from __future__ import annotations

import pytest

from tests.standins.standin_lib import events, of_kind, run_trainer, seed_inputs

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")


# Loopback only: Ray otherwise binds and advertises the machine's own address, and a driver
# given 127.0.0.1 replaces it with that address (ray/_private/services.py:786-821 of ray 2.60.0,
# resolve_ip_for_localhost -> get_node_ip_address, which keeps the loopback address only when
# ENABLE_RAY_CLUSTER, read from this variable, is off).
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
START_ATTEMPTS = 3  # ray 2.60's raylet aborts when its dashboard agent takes > 15 s to start (2 busy cores)


@pytest.fixture(scope="module")
def cluster():
    # a head like KubeRay's for the seed (rayStartParams num-gpus: 8) on a 2-CPU machine
    mp = pytest.MonkeyPatch()
    for key, value in LOOPBACK_ENV.items():
        mp.setenv(key, value)
    for attempt in range(1, START_ATTEMPTS + 1):
        c = cluster_utils.Cluster()
        try:
            c.add_node(num_cpus=2, num_gpus=8, include_dashboard=False, node_ip_address="127.0.0.1")
            break
        except Exception:  # the raylet's start-up race, logged in its raylet.out
            c.shutdown()
            if attempt == START_ATTEMPTS:
                mp.undo()
                raise
    try:
        yield c
    finally:
        c.shutdown()
        mp.undo()


def test_rollouts_run_as_ray_actors_and_tasks(cluster, tmp_path):
    argv = seed_inputs(tmp_path, knobs={"seconds_per_rollout": 0.1})
    result = run_trainer(
        argv + ["--num-rollout", "3", "--save-interval", "2", "--eval-interval", "2"],
        inline=False,
        env={**LOOPBACK_ENV, "RAY_ADDRESS": cluster.address, "MILES_STANDIN_EXECUTOR": "ray"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout + result.stderr
    assert "Ray cluster resources: GPU=8" in out
    assert "(MegatronTrainRayActor pid=" in out and "(RolloutManager pid=" in out
    evs = events(out)
    assert [e.id for e in of_kind(evs, "rollout")] == [0, 1, 2]
    assert sorted({e.id for e in of_kind(evs, "saving")}) == [1, 2]
    assert [e.id for e in of_kind(evs, "eval")] == [0, 1]
    assert "Connecting to existing Ray cluster at address: 127.0.0.1:" in out
