# patchkit — see README.md.  `make demo` is the main job; `make test` runs both test tiers,
# `make test-fast` only the offline one (no network; under a minute), `make lint` runs ruff.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PK := $(BIN)/patchkit

.PHONY: setup demo test test-fast bench lint docs clean

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

# Offline tier: everything not marked `real`.  tests/conftest.py turns the network off for it
# (a socket, a name look-up, or pip/git reaching an index fails the test, naming it).
# On FAST_JOBS pytest-xdist workers.  On 2 cores, 3 workers: 38 s idle, 51 s beside one busy
# process, 58 s beside two; 2 workers: 34, 59 and 73 s (a third keeps the tier's share of a
# machine another job is using).
FAST_JOBS ?= 3
test-fast: setup
	PATCHKIT_OFFLINE_TESTS=1 $(BIN)/python -m pytest -q -m "not real" -n $(FAST_JOBS) --dist loadgroup

# Both tiers: the offline one under its guard, then the tests on real releases from the index,
# on REAL_JOBS pytest-xdist workers (REAL_JOBS=0: in this process).  Tests that share
# module fixtures or patchkit's drift cache carry one xdist_group and run on one worker.
REAL_JOBS ?= 2
test: test-fast
	$(BIN)/python -m pytest -q -m real -n $(REAL_JOBS) --dist loadgroup

bench: setup
	$(BIN)/python bench/run.py

# The reference in docs/ (MkDocs + Material, mkdocs.yml), into the git-ignored site/;
# --strict fails on a broken link or anchor.  tests/product/test_docs.py builds it in the offline tier.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

lint: setup
	$(BIN)/ruff check patchkit tests bench
	$(BIN)/ruff format --check patchkit tests bench
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .patchkit site
