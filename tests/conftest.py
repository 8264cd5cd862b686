import os

import pytest
from hypothesis import settings
from lorarl.runtime.kube import Api

pytest_plugins = ["lorarl_dev.pytest_plugin"]

from tests.chart.helm import helm  # noqa: E402,F401  (the session fixture: real helm, empty homes)
from tests.helpers import operator_api  # noqa: E402

# Hypothesis: no per-example deadline (the fuzz runs real shells and a real API server on shared
# machines); in CI (CI set, or HYPOTHESIS_PROFILE=ci) derandomized, so a run is reproducible and
# its time predictable. The example counts are set per test (LORARL_FUZZ_EXAMPLES, default 500).
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def kube(control_plane) -> Api:
    """The operator's own API client, as admin, on the session's control plane."""
    with operator_api(control_plane) as api:
        yield api
