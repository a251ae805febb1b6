# patchkit — see README.md.  `make demo` is the main job; `make test` runs the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PK := $(BIN)/patchkit

.PHONY: setup demo test bench lint clean

$(BIN)/patchkit: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@

setup: $(BIN)/patchkit

# From nothing to patched, pinned SGLang 0.5.9 + FlashInfer 0.6.3 trees.
demo: setup
	$(PK) sync
	$(PK) apply sm120
	$(PK) status sm120
	$(PK) diff --applied sm120

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python bench/run.py

lint: setup
	$(BIN)/pip install --quiet --disable-pip-version-check pyflakes
	$(BIN)/python -m pyflakes patchkit tests bench

clean:
	rm -rf $(VENV) .patchkit
