# Calibration runs that anyone can check. `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
FIXTURES ?= ../shared/fixtures
OUT ?= out/standin
KEY ?=
BUNDLE ?=
TRUSTED_KEY ?=

.PHONY: help install test test-fast lint standin-run smoke verify bench

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

$(PY):
	python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY) ## create .venv and install the locked dependencies (CPU torch)
	$(PY) -m pip install -q -r requirements.lock -r requirements-dev.lock
	$(PY) -m pip install -q --no-deps -e .

test: ## run the whole test suite (unit + integration on ../shared/fixtures when present)
	$(PY) -m pytest -q

test-fast: ## unit tests only
	$(PY) -m pytest -q -m "not integration and not docker and not slow"

standin-run: ## full job on the stand-in resources: make standin-run OUT=DIR [KEY=signing-key.pem]
	$(PY) -m job run --resources job/resources/standin.json --out $(OUT) $(if $(KEY),--signing-key $(KEY),--ephemeral-key)

smoke: ## 8-row smoke test on the stand-in resources
	$(PY) -m job smoke --resources job/resources/standin.json

verify: ## verify a bundle without torch: make verify BUNDLE=DIR|TAR.GZ [TRUSTED_KEY=PUB.pem]
	$(PY) -m verify $(BUNDLE) $(if $(TRUSTED_KEY),--trusted-key $(TRUSTED_KEY))

bench: ## performance benchmark; prints a table and writes bench.json
	$(PY) scripts/bench.py
