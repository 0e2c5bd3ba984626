# behavioral_pq: `make demo` sets up and runs the demo; `make test` runs the default test suite; `make docs` builds
# the documentation site into site/ (a warning or a broken link fails it).
VENV ?= .venv
PY := $(VENV)/bin/python
# The package is installed editable: edits to its Python files need no reinstall; the native core (src/native),
# the build and setup files and the set of package files (the editable install maps each module to its file, so a
# module added, moved or removed needs one) do. The stamp records the last setup, so `make test` reinstalls only
# when one of those changed.
SETUP_STAMP := $(VENV)/.bpq-setup
PACKAGE_FILES := $(VENV)/.bpq-package-files
SETUP_INPUTS := $(wildcard src/native/*) CMakeLists.txt pyproject.toml scripts/setup.sh $(PACKAGE_FILES)

.PHONY: setup demo test test-all docs bench clean FORCE

setup: $(SETUP_STAMP)

$(SETUP_STAMP): $(SETUP_INPUTS)
	bash scripts/setup.sh
	touch $@

# rewritten (and so newer than the stamp) only when the list of package files changes
$(PACKAGE_FILES): FORCE
	@mkdir -p $(VENV)
	@find behavioral_pq -name '*.py' -not -path '*/__pycache__/*' | LC_ALL=C sort > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

demo: setup
	$(VENV)/bin/bpq demo --out bpq-demo

test: setup
	$(PY) -m pytest -m "not slow" -q

test-all: setup
	$(PY) -m pytest -q

docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: setup
	$(PY) bench/spectra/bench_spectra.py

clean:
	rm -rf build bpq-demo site .pytest_cache
