# Calibration runs that anyone can check. `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
FIXTURES ?= ../shared/fixtures
OUT ?= out/standin
KEY ?=
BUNDLE ?=
TRUSTED_KEY ?=

.PHONY: help install test test-slow test-fast lint standin-run smoke verify bench bench-job bench-peers-env web

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

$(PY):
	python3.11 -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY) ## create .venv, install the locked dependencies (CPU torch) and the calibration-job command
	@echo "install: $$(grep -c '^[a-z0-9]' requirements.lock) locked runtime and $$(grep -c '^[a-z0-9]' requirements-dev.lock) development packages into $(VENV) (a few minutes; PyTorch is the largest)"
	set -o pipefail; $(PY) -m pip install --require-hashes -r requirements.lock -r requirements-dev.lock 2>&1 \
	  | { grep --line-buffered -E '^(Collecting|Processing|Installing|Successfully)|ERROR|rror:' || true; }
	@echo "install: the calibration-job command (editable, from this folder)"
	PYTHONWARNINGS=ignore $(PY) -m pip install -q --no-deps --no-build-isolation --disable-pip-version-check -e .
	@echo "install: done; $(VENV)/bin/calibration-job works from any folder"

# The fast suite runs in as many pytest-xdist workers as the machine has CPUs (TEST_WORKERS=0: one
# process); each test module stays on one worker, so a module's fixtures are built once.
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

test: ## the test suite without the slow tests (unit + integration on ../shared/fixtures when present)
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

test-slow: ## the slow tests only: byte-flip fuzzing, clean virtual environments, validators
	$(PY) -m pytest -q -m slow

test-fast: ## unit tests only
	$(PY) -m pytest -q -m "not integration and not docker and not slow"

lint: ## ruff (lint rules and the line-length limit) + strict mypy; both pinned in requirements-dev.lock
	$(PY) -m ruff check job bundle verify tests scripts
	$(PY) -m mypy

standin-run: ## full job on the stand-in resources: make standin-run OUT=DIR [KEY=signing-key.pem]
	$(PY) -m job run --resources job/locks/standin.json --out $(OUT) $(if $(KEY),--signing-key $(KEY),--ephemeral-key)

smoke: ## 8-row smoke test on the stand-in resources
	$(PY) -m job smoke --resources job/locks/standin.json

verify: ## verify a bundle without torch: make verify BUNDLE=DIR|TAR.GZ [TRUSTED_KEY=PUB.pem]
	$(PY) -m verify $(BUNDLE) $(if $(TRUSTED_KEY),--trusted-key $(TRUSTED_KEY))

BENCH_VENV ?= .bench-venv
BENCH_ARGS ?=

bench: ## the forward against its peers, interleaved, 1 thread and the default (docs/PERFORMANCE.md); BENCH_ARGS=...
	$(PY) scripts/bench_peers.py --peer-python $(if $(wildcard $(BENCH_VENV)/bin/python),$(BENCH_VENV)/bin/python,none) $(BENCH_ARGS)

bench-peers-env: ## benchmark-only .bench-venv: requirements.lock + ONNX Runtime, OpenVINO, onnx (scripts/bench-peers.lock)
	test -x $(BENCH_VENV)/bin/python || python3.11 -m venv $(BENCH_VENV) || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --require-hashes -r requirements.lock -r scripts/bench-peers.lock

bench-job: ## the job's own benchmark: GEMM fraction, naive pipeline, formal-run peak RSS (writes bench.json)
	$(PY) scripts/bench.py

# The browser verifier: npm packages exactly as web/package-lock.json pins them (integrity-checked;
# no install scripts, no browser download), then the page, the same bytes every time.
web/node_modules/.installed: web/package.json web/package-lock.json
	cd web && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund
	touch $@

web: web/node_modules/.installed ## build the browser verifier web/dist/verify.html (committed; same bytes twice)
	cd web && node build.mjs

# ---- dependency locks, wheelhouse, container ------------------------------------------------
# HOSTPY: a CPython 3.11 on linux x86_64 whose pip reaches the CPU torch wheel (find-links).
HOSTPY ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
IMAGE ?= calibration-job:latest
# BASE_IMAGE empty: build calibration-base:bookworm locally (debootstrap; no registry needed).
# To use the official image: make image BASE_IMAGE=python:3.11-slim-bookworm@sha256:<digest>
BASE_IMAGE ?=
LOCAL_BASE ?= calibration-base:bookworm
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 1767225600)
IMAGE_SRC := pyproject.toml provenance.json requirements.lock schemas bundle verify job
GIT_COMMIT ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { [ -z "$$(git status --porcelain -- $(IMAGE_SRC))" ] && echo $$c || echo $$c-dirty; })
CACHE ?= $(or $(HF_HOME),$(HOME)/.cache/huggingface)
OUTDIR ?= out
KEYDIR ?= keys
NAME ?= formal
RESOURCES ?=
ATTESTATION ?= reproduction.intoto.json
SAMPLE ?=
SEED ?=

.PHONY: lock lock-check wheelhouse base-image image run reproduce docker-smoke docker-test

lock: ## re-lock requirements*.lock with hashes (keeps locked versions; ARGS=--upgrade to move)
	$(HOSTPY) scripts/lock.py $(ARGS)

lock-check: ## fail if requirements*.lock are not what `make lock` would write
	$(HOSTPY) scripts/lock.py --check

# Wheels for the host's tags: run it on linux x86_64 with CPython 3.11 and glibc >= 2.34, like the
# image (bookworm, glibc 2.36). (pip 23's --platform does not widen manylinux_2_X to older tags.)
wheelhouse: requirements.lock ## download the locked runtime wheels (hash-checked) into wheelhouse/
	@$(HOSTPY) -c 'import sys, platform; sys.exit(None if sys.version_info[:2] == (3, 11) and platform.machine() == "x86_64" and sys.platform == "linux" else "wheelhouse: needs CPython 3.11 on linux x86_64 (HOSTPY=...)")'
	mkdir -p wheelhouse
	set -o pipefail; $(HOSTPY) -m pip download --quiet --disable-pip-version-check --require-hashes \
	  --no-deps --only-binary=:all: -r requirements.lock -d wheelhouse 2>&1 \
	  | { grep -v "^WARNING: Location 'file:.*' is ignored" || true; }
	@keep=$$(sed -n 's/^    # \(.*\.whl\)$$/\1/p' requirements.lock); \
	for f in wheelhouse/*; do \
	  grep -qxF "$${f#wheelhouse/}" <<<"$$keep" || { echo "wheelhouse: removing stale $$f"; rm -f "$$f"; }; \
	done; \
	echo "wheelhouse: $$(ls wheelhouse | wc -l) files, $$(du -sh wheelhouse | cut -f1)"

base-image: ## build (or reuse) the debootstrapped base image $(LOCAL_BASE)
	bash scripts/base-image.sh

image: wheelhouse ## build the job image $(IMAGE) offline (docker build --network none)
	@base="$(BASE_IMAGE)"; \
	if [ -z "$$base" ]; then BASE_TAG=$(LOCAL_BASE) bash scripts/base-image.sh >/dev/null; base=$(LOCAL_BASE); fi; \
	echo "image: building $(IMAGE) on $$base"; \
	docker build --network none --build-arg BASE_IMAGE="$$base" \
	  --build-arg SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) --build-arg CALIBRATION_IMAGE=$(IMAGE) \
	  --build-arg CALIBRATION_GIT_COMMIT=$(GIT_COMMIT) \
	  -t $(IMAGE) . && \
	docker image inspect -f 'image: {{.Id}} {{.Size}} bytes' $(IMAGE)

run: ## job in the container: make run [NAME=formal] [OUTDIR=out] [KEYDIR=keys] [CACHE=$$HF_HOME] [RESOURCES=job/locks/standin.json]
	IMAGE=$(IMAGE) OUTDIR=$(OUTDIR) CACHE=$(CACHE) KEYDIR=$(KEYDIR) \
	  $(if $(RESOURCES),FIXTURES=$(FIXTURES)) bash scripts/docker-run.sh \
	  run --out /out/$(NAME) --signing-key /keys/signing-key.pem --no-progress \
	  $(if $(RESOURCES),--resources /app/$(RESOURCES))

reproduce: ## re-run a bundle's inference in the container, sign what it found: make reproduce BUNDLE=DIR|TAR.GZ KEYDIR=keys [CACHE=$$HF_HOME] [OUTDIR=out] [ATTESTATION=name.json] [RESOURCES=job/locks/standin.json] [SAMPLE=N SEED=S]
	@test -n "$(BUNDLE)" || { echo "reproduce: pass BUNDLE=DIR|TAR.GZ, the bundle to re-run" >&2; exit 2; }
	IMAGE=$(IMAGE) OUTDIR=$(OUTDIR) CACHE=$(CACHE) KEYDIR=$(KEYDIR) BUNDLE=$(BUNDLE) \
	  $(if $(RESOURCES),FIXTURES=$(FIXTURES)) bash scripts/docker-run.sh \
	  reproduce /bundle/$(notdir $(patsubst %/,%,$(BUNDLE))) --out /out/$(ATTESTATION) \
	  --signing-key /keys/signing-key.pem --no-progress \
	  $(if $(RESOURCES),--resources /app/$(RESOURCES)) $(if $(SAMPLE),--sample $(SAMPLE) --seed $(SEED))

docker-smoke: ## 8-row smoke test in the container on the stand-in resources (no network)
	IMAGE=$(IMAGE) FIXTURES=$(FIXTURES) bash scripts/docker-run.sh smoke --resources /app/job/locks/standin.json

docker-test: ## build the image and check container runs are byte-identical to a host run
	bash scripts/docker-test.sh
