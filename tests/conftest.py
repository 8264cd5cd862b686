pytest_plugins = ["lorarl_dev.pytest_plugin"]

from tests.chart.helm import helm  # noqa: E402,F401  (the session fixture: real helm, empty homes)
