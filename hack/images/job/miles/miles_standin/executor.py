"""Where the actors run: in Ray, as miles runs them, or in this process for the fast tests.

Ray (the default): ``ray.init(address="auto")`` joins the cluster the job was submitted to; a
placement group of one ``{"GPU": 1, "CPU": c}`` bundle per GPU, PACK (ray/placement_group.py:
51-58, colocated size max(actor GPUs, rollout GPUs): :92-104); the RolloutManager actor with
``num_gpus=0`` (:187-190); each train rank an actor of class ``MegatronTrainRayActor`` with
``num_gpus=0.4`` in bundle r (ray/train/actor_factory.py:73-101, placement_group.py:135); one
``SGLangEngine`` actor per engine with ``num_gpus=0.2`` in bundle e, started once and kept for the
run (ray/rollout/server_group.py:76-130), which generates each of its shares of a batch. Ray
prints their lines with its ``(MegatronTrainRayActor pid=N)`` prefix. Long-lived engines matter
beyond fidelity: a task per share needs a fresh Ray worker per engine and rollout once the idle
ones exceed the node's soft limit (its CPU count), and each start costs a Python with Ray.
miles asks for 1 CPU per bundle and as much CPU as GPU per actor; the CPU requests are
scaled by the ``cpu_scale`` knob (default 0.1: a test node has 2 CPUs; 1.0 is miles' own).
Without ``ray`` installed this is an error, never a silent fallback.

Inline (``MILES_STANDIN_EXECUTOR=inline``, for tests without a Ray cluster): the same classes
called in this process, one after another, with Ray's prefix written by us.
"""

from __future__ import annotations

import os
import sys

ENV = "MILES_STANDIN_EXECUTOR"
TRAIN_GPU, ENGINE_GPU = 0.4, 0.2


class StandinError(RuntimeError):
    pass


def _prefix(cls_name: str) -> str:
    return f"({cls_name} pid={os.getpid()}) "


class Inline:
    name = "inline"

    def __init__(self, knobs):
        self.knobs = knobs

    def cluster_gpus(self):
        return None

    def placement_group(self, num_gpus: int):
        return None

    def dispatch(self, fn, calls: list) -> list:
        # one after another here, side by side in Ray: the rollout's wall time is shared out
        share = len(calls) or 1
        return [fn(**dict(kw, seconds=kw.get("seconds", 0) / share)) for kw in calls]

    def rollout_manager(self, cls, *args):
        return cls(*args, self.dispatch, _prefix("RolloutManager"))

    def train_actor(self, cls, rank: int, *args):
        return cls(*args, _prefix("MegatronTrainRayActor"))

    def call(self, handle, method: str, *args):
        return getattr(handle, method)(*args)

    def call_all(self, handles: list, method: str, *args) -> list:
        return [getattr(h, method)(*args) for h in handles]

    def finish(self):
        pass


class SGLangEngine:
    """One rollout engine: an actor for the whole run, as miles' (its name is Ray's log prefix)."""

    def run(self, fn, kw: dict):
        return fn(**kw)


class RayDispatch:
    """Shares of a batch from inside the RolloutManager actor: each to its engine's actor, which
    is started in its bundle on first use and then kept."""

    def __init__(self, pg, cpu_scale: float):
        self.pg, self.cpu_scale = pg, cpu_scale
        self.engines: dict = {}

    def _engine(self, index: int):
        if index not in self.engines:
            import ray
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            strategy = PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=index % self.pg.bundle_count)
            options = dict(num_gpus=ENGINE_GPU, num_cpus=ENGINE_GPU * self.cpu_scale, scheduling_strategy=strategy)
            self.engines[index] = ray.remote(SGLangEngine).options(**options).remote()
        return self.engines[index]

    def __call__(self, fn, calls: list) -> list:
        import ray

        return ray.get([self._engine(kw["engine"]).run.remote(fn, kw) for kw in calls])


class Ray:
    name = "ray"

    def __init__(self, knobs):
        try:
            import ray
        except ImportError as exc:
            raise StandinError(
                f"the miles stand-in runs its rollouts in Ray, and ray cannot be imported ({exc}); set {ENV}=inline only in tests that have no Ray cluster"
            ) from None
        self.ray = ray
        # ship our code to the workers by value: they need no import path to it
        ray.cloudpickle.register_pickle_by_value(sys.modules[__package__])
        ray.init(address="auto")
        self.knobs = knobs
        self.pg = None

    def cluster_gpus(self):
        return self.ray.cluster_resources().get("GPU", 0)

    def placement_group(self, num_gpus: int):
        from ray.util.placement_group import placement_group

        bundles = [{"GPU": 1, "CPU": self.knobs.cpu_scale} for _ in range(num_gpus)]
        self.pg = placement_group(bundles, strategy="PACK")
        self.ray.get(self.pg.ready())  # waits, as miles does, until the cluster can hold it
        return self.pg

    def dispatch(self, fn, calls):
        return RayDispatch(self.pg, self.knobs.cpu_scale)(fn, calls)

    def rollout_manager(self, cls, *args):
        actor = self.ray.remote(cls).options(num_gpus=0, num_cpus=self.knobs.cpu_scale)
        return actor.remote(*args, RayDispatch(self.pg, self.knobs.cpu_scale), "")

    def train_actor(self, cls, rank: int, *args):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=rank)
        return self.ray.remote(cls).options(num_gpus=TRAIN_GPU, num_cpus=TRAIN_GPU * self.knobs.cpu_scale, scheduling_strategy=strategy).remote(*args, "")

    def call(self, handle, method: str, *args):
        return self.ray.get(getattr(handle, method).remote(*args))

    def call_all(self, handles: list, method: str, *args) -> list:
        return self.ray.get([getattr(h, method).remote(*args) for h in handles])

    def finish(self):
        # worker lines reach the driver through Ray's log monitor a moment after they are
        # written; the last save's lines must not be cut off by the driver's exit
        import time

        time.sleep(2.0)


def make(knobs):
    mode = os.environ.get(ENV, "ray")
    if mode == "inline":
        return Inline(knobs)
    if mode != "ray":
        raise StandinError(f"{ENV} must be 'ray' or 'inline', got {mode!r}")
    return Ray(knobs)
