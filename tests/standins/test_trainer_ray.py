"""The trainer stand-in in a real Ray cluster (skipped where ray is not importable; the end-to-end
run in the job image exercises it under KubeRay): its actors and tasks take GPUs from a head that
advertises them, and their lines reach the driver with Ray's own prefix."""

from __future__ import annotations

import pytest

from tests.standins.standin_lib import events, of_kind, run_trainer, seed_inputs

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")


@pytest.fixture(scope="module")
def cluster():
    # a head like KubeRay's for the seed (rayStartParams num-gpus: 8) on a 2-CPU machine
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 8,
                                                                    "include_dashboard": False})
    try:
        yield c
    finally:
        c.shutdown()


def test_rollouts_run_as_ray_actors_and_tasks(cluster, tmp_path):
    argv = seed_inputs(tmp_path, knobs={"seconds_per_rollout": 0.1})
    result = run_trainer(argv + ["--num-rollout", "3", "--save-interval", "2", "--eval-interval", "2"], inline=False,
                         env={"RAY_ADDRESS": cluster.address, "MILES_STANDIN_EXECUTOR": "ray"}, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout + result.stderr
    assert "Ray cluster resources: GPU=8" in out
    assert "(MegatronTrainRayActor pid=" in out and "(RolloutManager pid=" in out
    evs = events(out)
    assert [e.id for e in of_kind(evs, "rollout")] == [0, 1, 2]
    assert sorted({e.id for e in of_kind(evs, "saving")}) == [1, 2]
    assert [e.id for e in of_kind(evs, "eval")] == [0, 1]
