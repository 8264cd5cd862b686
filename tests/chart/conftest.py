from tests.chart.helm import helm  # noqa: F401  (the session fixture)
