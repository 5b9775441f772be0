"""Root conftest: the experiment's pytest plugin lives in fixtures/ (options, markers, knobs, runs)."""

pytest_plugins = [
    "fixtures.options",
    "fixtures.report",
    "fixtures.knobs",
    "fixtures.runs",
    "fixtures.experiment",
]
