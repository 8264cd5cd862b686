"""A bounded, decimated curve of (rollout, value) points: what ``status.history`` keeps so that
``lorarl plot`` and ``lorarl watch`` draw a run without Prometheus or W&B.

Points sit on a grid of rollouts that are multiples of ``stride``. When more than ``limit``
points are on it, the stride doubles and every other point goes: a run of any length keeps
between limit / 2 and limit points, spread evenly over all its rollouts (10,000 rollouts at
limit 100: stride 128, 79 points). The newest point is always kept beside the grid, so the
curve reaches the rollout the run is at. Deterministic: the same points in give the same curve,
whatever the order of attempts. Python 3.10, standard library only (it runs in the job).
"""

from __future__ import annotations

LIMIT = 100  # points per curve (docs/observability.md: the size at 100 and 10,000 rollouts)


class Curve:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = max(2, int(limit))
        self.stride = 1
        self._grid: dict[int, float] = {}
        self._latest: tuple[int, float] | None = None

    def add(self, rollout: int, value: float) -> None:
        rollout = int(rollout)
        if self._latest is None or rollout >= self._latest[0]:
            self._latest = (rollout, value)
        if rollout % self.stride:
            return
        self._grid[rollout] = value
        while len(self._grid) > self.limit:
            self.stride *= 2
            self._grid = {r: v for r, v in self._grid.items() if r % self.stride == 0}

    def points(self) -> list[list[float]]:
        out = [[r, v] for r, v in sorted(self._grid.items())]
        if self._latest is not None and (not out or self._latest[0] > out[-1][0]):
            out.append([self._latest[0], self._latest[1]])
        return out

    def __bool__(self) -> bool:
        return self._latest is not None
