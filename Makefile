# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck bench clean browser screenshots

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/badput demo

test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q

# The same without the tests marked slow (the real-framework runs of tests/integrations/).
test-fast: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools

typecheck: $(STAMP)
	$(BIN)/mypy

# Debian's headless Chromium and its driver for the HTML view tests (they install it
# themselves when missing; this target does it ahead of time).
browser:
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)

# The screenshots of docs/views.md and the README, made by the browser tests.
screenshots: $(STAMP) browser
	BADPUT_SCREENSHOTS=docs/images $(BIN)/python -m pytest -q tests/test_views_browser.py

bench: $(STAMP)
	$(BIN)/python bench/bench_record.py
	$(BIN)/python bench/bench_report.py

clean:
	rm -rf $(VENV) badput-runs .pytest_cache .mypy_cache .ruff_cache
