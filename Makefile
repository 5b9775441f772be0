# Thin launcher: every target first makes sure the environment exists (tools/setup_env.py is
# idempotent and quick when nothing changed). Orchestration lives in Python, not here.
PY := .venv/bin/python
PYTEST := $(PY) -m pytest

.PHONY: setup setup-browser baseline test lint report clean-runs

setup:
	python3 tools/setup_env.py

# The environment plus Debian's chromium, for the tests that open the report in a browser. The
# main job never opens one, so only `make test` waits for that apt install.
setup-browser:
	python3 tools/setup_env.py --browser

# The main job: the baseline ladder on the embedded backend (P1, colocate), the acceptance
# criteria, the P3 A/B, then the HTML report. Writes reports/allure-results, reports/allure-report
# and reports/experiment/ (experiment.json and index.html, whose path is the last line printed).
baseline: setup
	$(PYTEST) -m "p1 or acceptance or (p3 and ab)" --mode=colocate --alluredir=reports/allure-results --clean-alluredir; \
	status=$$?; $(PY) -m harness report && exit $$status

# Every test of the suite. Its own record goes to reports/selftest/ (Allure results, summary,
# experiment record), so it never overwrites the experiment's. Two pytest-xdist workers: the test
# bodies are mostly one process each, and two keep a 2-core machine busy beside the planned runs
# (both workers launch the plan; a per-run lock makes each run once). TEST_WORKERS=0 runs every
# test in one process.
TEST_WORKERS ?= 2
test: setup-browser
	$(PYTEST) -n $(TEST_WORKERS) --alluredir=reports/selftest/allure-results --clean-alluredir

# Lint and format check (pyproject.toml [tool.ruff]); CI runs it before the tests.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

report: setup
	$(PY) -m harness report

clean-runs:
	rm -rf reports/runs
