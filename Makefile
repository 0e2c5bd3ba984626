# behavioral_pq: `make demo` sets up and runs the demo; `make test` runs the default test suite.
VENV ?= .venv
PY := $(VENV)/bin/python
# The package is installed editable: Python changes need no reinstall, the native core (src/native) and the
# build and setup files do. The stamp records the last setup, so `make test` reinstalls only when one changed.
SETUP_STAMP := $(VENV)/.bpq-setup
SETUP_INPUTS := $(wildcard src/native/*) CMakeLists.txt pyproject.toml scripts/setup.sh

.PHONY: setup demo test test-all bench clean

setup: $(SETUP_STAMP)

$(SETUP_STAMP): $(SETUP_INPUTS)
	bash scripts/setup.sh
	touch $@

demo: setup
	$(VENV)/bin/bpq demo --out bpq-demo

test: setup
	$(PY) -m pytest -m "not slow" -q

test-all: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/bench_spectra.py

clean:
	rm -rf build bpq-demo .pytest_cache
