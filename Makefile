# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck bench clean browser screenshots

# The demo needs only the core (numpy, msgspec, click, rich); the tests need every extra,
# the frameworks included (about 2.2 GB), so the two have their own stamps.
CORE   := $(VENV)/.core-installed

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(CORE)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(CORE)
	$(BIN)/badput demo

# Two test processes (pytest-xdist) at most four: much of the suite waits on subprocesses.
XDIST  := --numprocesses=auto --maxprocesses=4

test: $(STAMP) browser lint typecheck
	$(BIN)/python -m pytest -q $(XDIST)

# The same without the tests marked slow (the real-framework runs of tests/integrations/).
test-fast: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools

typecheck: $(STAMP)
	$(BIN)/mypy

# Debian's headless Chromium and its driver for the HTML view tests, tmux for the 80x24
# terminal test and promtool (package prometheus) for the alert rules' tests (the tests
# install them too when missing; in CI a missing one fails its tests, elsewhere they skip).
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver -a -x /usr/bin/tmux \
	  -a -x /usr/bin/promtool || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends chromium chromium-driver tmux prometheus) || \
	  echo "warning: could not install chromium/tmux/promtool: their tests will skip"

# The screenshots of docs/views.md and the README, made by the browser tests.
screenshots: $(STAMP) browser
	BADPUT_SCREENSHOTS=docs/images $(BIN)/python -m pytest -q tests/test_views_browser.py \
		tests/test_program_views.py -k "browser or html"

bench: $(STAMP)
	$(BIN)/python bench/host_speed.py
	$(BIN)/python bench/bench_record.py
	$(BIN)/python bench/bench_report.py

clean:
	rm -rf $(VENV) badput-runs .pytest_cache .mypy_cache .ruff_cache
