# behavioral_pq: `make demo` sets up and runs the demo; `make test` runs the default test suite.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test test-all bench clean

setup:
	bash scripts/setup.sh

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
