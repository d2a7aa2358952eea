# Front door: `make demo` and `make test` each set everything up from a fresh clone, then run.
# `make demo` installs the core (requirements/core.lock: the demo and the CLIs, no flavor extra,
# no test tools), `make test` the full set (requirements/project.lock: the core's pins plus every
# extra) into the same venv, so `make demo` then `make test` only adds what the tests need.
# Setup is idempotent and cached: the venv is rebuilt only when a lock file changes, and the
# embedded Triton runtime only when its pins change (`builder runtime install` checks a stamp).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The venv stamp carries the locks' hash, so editing a lock rebuilds the environment. Every lock
# pins each package with the sha256 of its files (`python -m tools.locks` adds them), and every
# install below runs with --require-hashes and --no-deps: exactly the locked bytes, then pip check.
LOCK_HASH := $(shell sha256sum requirements/project.lock requirements/bootstrap.lock requirements/torch-cpu.lock requirements/torch-cuda.lock pyproject.toml | sha256sum | cut -c1-12)
VENV_STAMP := $(VENV)/.installed-$(LOCK_HASH)
CORE_HASH := $(shell sha256sum requirements/core.lock requirements/bootstrap.lock pyproject.toml | sha256sum | cut -c1-12)
CORE_STAMP := $(VENV)/.core-$(CORE_HASH)
export BUILDER_RUNTIME_DIR ?= $(CURDIR)/.runtime
PYTEST_ARGS ?=
# Two workers, one per core: a test file runs whole in one worker (tests/conftest.py says why
# loadfile); much of a test's time is single-threaded Python (training, conversion, parity), so
# two of them cut the wall time (three were 4 % faster and less steady: docs/testing.md).
# --no-loadscope-reorder: the workers get the longest files first (tests/conftest.py's
# LONGEST_FIRST), not xdist's files-with-most-tests first. PYTEST_WORKERS=0 runs in one process.
# --durations=15: the slowest steps, for docs/testing.md and for noticing a test that grew.
PYTEST_WORKERS ?= 2

.PHONY: setup setup-demo venv venv-core runtime redis java wrk haproxy chromium prometheus perf-analyzer test demo bench gpu-check lint image image-check clean help

help:
	@echo "make demo   - set up, then train -> register -> export -> serve -> predict -> gate -> drift"
	@echo "make test   - set up, then run every test (unit and integration, real servers)"
	@echo "make bench  - set up, then run the benchmarks (writes benchmarks/results/)"
	@echo "make gpu-check - on a GPU machine: install the gpu extra, run the gpu tests and bench (d)"
	@echo "make lint   - ruff and mypy"
	@echo "make image  - docker build the gateway image the Helm chart deploys (triton-stack/gateway:VERSION)"
	@echo "make image-check - build the image with buildah and run it against a real Triton + Feast store"

setup: venv runtime redis

# The demo's feature store is SQLite: it needs no redis-server.
setup-demo: venv-core runtime

# The installer of the locks: uv (pinned and hashed in bootstrap.lock, installed by the venv's own
# pip), about twice as fast as pip here (docs/testing.md). INSTALLER=pip installs them with pip
# instead: the fallback where uv cannot reach the index pip is set up for (uv does not read
# pip.conf). torch's CPU build is installed by pip either way: it lies in pip's find-links.
# No bytecode compiled at install (uv's default; pip's --no-compile): Python writes the .pyc of
# what is imported on first import (below), where compiling all 1.4 GB took ~75 s of a fresh
# setup's ~80 s (torch alone ~20 s); the image compiles all of its venv, which runs read-only.
INSTALLER ?= uv
ifeq ($(INSTALLER),pip)
LOCKED_INSTALL = $(BIN)/python -m pip install --quiet --no-compile --require-hashes --no-deps -r
PIP_CHECK = $(BIN)/python -m pip check
EDITABLE_INSTALL = $(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
else
LOCKED_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python --require-hashes --no-deps -r
PIP_CHECK = $(BIN)/uv pip check --quiet --python $(BIN)/python
EDITABLE_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps --no-build-isolation -e .
endif

# The venv and bootstrap.lock's pip, setuptools and uv in it. Made without ensurepip's pip
# (installing it, then bootstrap.lock's over it, was 12 s of setup here) where the interpreter's
# own pip can install into another environment (`pip --python`, pip 22.3+); else with ensurepip.
NEW_VENV = { test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV); } && \
	if $(BIN)/python -m pip --version >/dev/null 2>&1; then \
	  $(BIN)/python -m pip install --quiet --require-hashes -r requirements/bootstrap.lock; \
	elif $(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1; then \
	  $(PYTHON) -m pip --python $(BIN)/python install --quiet --require-hashes -r requirements/bootstrap.lock; \
	else $(BIN)/python -m ensurepip >/dev/null && \
	  $(BIN)/python -m pip install --quiet --require-hashes -r requirements/bootstrap.lock; fi

# Python writes the bytecode of what it imports into the venv, once. Where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine's image does), nothing was ever written, the install
# compiles nothing either (above), and every process compiled scikit-learn, MLflow, Feast and
# shap from source again: the demo's steps took 184 s instead of 64 s (docs/testing.md). The
# venv is this project's build output, so make's recipes write it; what the user runs
# afterwards reads it either way.
unexport PYTHONDONTWRITEBYTECODE

venv: $(VENV_STAMP)

venv-core: $(CORE_STAMP)

$(VENV_STAMP): requirements/project.lock requirements/bootstrap.lock requirements/torch-cpu.lock requirements/torch-cuda.lock pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python 3.11+ is required"'
	$(NEW_VENV)
	$(LOCKED_INSTALL) requirements/project.lock
	$(BIN)/python -m pip install --quiet --no-compile --require-hashes --no-deps -r requirements/torch-cpu.lock 2>/dev/null || { \
	  echo "torch's CPU build is not on this machine: installing PyPI's build (requirements/torch-cuda.lock)"; \
	  $(BIN)/python -m pip install --quiet --no-compile --require-hashes --no-deps -r requirements/torch-cuda.lock; }
	$(PIP_CHECK)
	$(EDITABLE_INSTALL)
	rm -f $(VENV)/.installed-* $(VENV)/.core-*
	touch $@ $(CORE_STAMP)

# project.lock holds core.lock with the same pins, so where the full set is installed the core
# is too; `make test` installs the full set first (setup's order), then finds the core done.
# The editable install is built here (--no-build-isolation) with bootstrap.lock's setuptools.
# torch: the CPU build (torch-cpu.lock) where the machine has it on disk (this kind does, in pip's
# find-links), else PyPI's CUDA build and its libraries (torch-cuda.lock).
$(CORE_STAMP): requirements/core.lock requirements/bootstrap.lock pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python 3.11+ is required"'
	if [ ! -f $(VENV_STAMP) ]; then \
	  { $(NEW_VENV); } && \
	  $(LOCKED_INSTALL) requirements/core.lock && \
	  $(PIP_CHECK) && \
	  $(EDITABLE_INSTALL) ; fi
	rm -f $(VENV)/.core-*
	touch $@

runtime: venv-core
	$(BIN)/builder runtime install

# The Feast Redis profile is tested against a real redis-server (Debian package redis-server).
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; \
	  else echo "redis-server is missing: sudo apt-get install redis-server (Debian/Ubuntu) or brew install redis" >&2; exit 1; fi; }

# Spark (`builder score`, the label join's Spark engine: the spark extra's pyspark) runs on a JVM,
# Java 17 or 21: Debian's openjdk-17-jre-headless. The man1 folder: the package's post-install
# links a man page there and fails on slim images that leave it out.
java:
	@command -v java >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then mkdir -p /usr/share/man/man1 && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null; \
	  else echo "java is missing: sudo apt-get install openjdk-17-jre-headless (Debian/Ubuntu)" >&2; exit 1; fi; }

# make bench's peer comparison (f) drives Triton and MLServer with wrk (Debian package wrk).
wrk:
	@command -v wrk >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq wrk >/dev/null; \
	  else echo "wrk is missing: sudo apt-get install wrk (Debian/Ubuntu) or brew install wrk" >&2; exit 1; fi; }

# Several gateway processes are tested behind one address through a real load balancer, as a
# Kubernetes Service spreads requests over replicas (support/balancer.py; Debian package haproxy;
# its service is not started: the tests start their own on a free port).
haproxy:
	@command -v haproxy >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; \
	  else echo "haproxy is missing: sudo apt-get install haproxy (Debian/Ubuntu) or brew install haproxy" >&2; exit 1; fi; }

# The HTML reports (drift, quality) are opened in a real headless browser by the tests
# (Debian package chromium).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	  else echo "chromium is missing: sudo apt-get install chromium (Debian/Ubuntu)" >&2; exit 1; fi; }

# The chart's alerts and recording rules are checked and unit-tested with promtool, and the
# dashboard's queries run against a real Prometheus (Debian package prometheus; its service is
# not started: the tests start their own on a free port).
prometheus:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else echo "prometheus is missing: sudo apt-get install prometheus (Debian/Ubuntu)" >&2; exit 1; fi; }

# perf_analyzer drives the gateway's Open Inference Protocol in the tests: the binary from the
# tritonclient 2.41 wheel, with Debian's libb64-0d (support/perf_analyzer.py says why).
perf-analyzer: runtime
	@dpkg -s libb64-0d >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq libb64-0d >/dev/null; \
	  else echo "libb64-0d is missing: sudo apt-get install libb64-0d (Debian/Ubuntu)" >&2; exit 1; fi; }
	@$(BIN)/python -m support.perf_analyzer >/dev/null

test: setup java chromium prometheus perf-analyzer haproxy lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

demo: setup-demo
	$(BIN)/python demo/run_demo.py

bench: setup java wrk haproxy
	@$(MAKE) --no-print-directory perf-analyzer || echo "bench: no perf_analyzer: part (c) says OIP was not measured" >&2
	$(BIN)/python benchmarks/run.py

# On a machine with an NVIDIA GPU and a route to https://pypi.nvidia.com (TensorRT's libraries
# are served from there, not from PyPI): the `gpu` extra, the `gpu` tests, then bench part (d).
# onnxruntime-gpu ships the same module as the CPU wheel, so it is reinstalled last.
gpu-check: setup
	$(BIN)/python -m pip install --quiet --no-build-isolation -e '.[gpu]'
	$(BIN)/python -m pip install --quiet --force-reinstall --no-deps "onnxruntime-gpu==1.31.1"
	$(BIN)/python -m pytest -m gpu -ra
	$(BIN)/python benchmarks/run.py --only gpu --results-dir benchmarks/results/gpu

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

# The gateway images; their tag is the chart's appVersion, which is what the chart pulls by default:
# triton-stack/gateway (serving: no Feast) and triton-stack/gateway-full (`--target full`: Feast,
# for the chart's compile-features init container and the payload log; docs/release.md).
# With no Docker engine answering (and DOCKER not set on the command line), buildah builds it:
# tools/image_check.py picks the base (the registry's, else a Debian one made with mmdebstrap).
DOCKER ?= docker
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}.*/\1/p' helm/triton-stack/Chart.yaml)
# Either way the image's CycloneDX SBOM (its Python packages) lands beside it, in
# build/triton-stack-gateway-$(VERSION).cdx.json (tools/sbom.py; the venv has its library).
image: venv
	@if [ "$(origin DOCKER)" = file ] && ! $(DOCKER) info >/dev/null 2>&1 && command -v buildah >/dev/null 2>&1; then \
	  echo "make image: no Docker engine answers; building with buildah" >&2; \
	  $(BIN)/python -m tools.image_check build --tag triton-stack/gateway:$(VERSION); \
	else \
	  command -v $(DOCKER) >/dev/null 2>&1 || { echo "make image: $(DOCKER) not found on PATH: install Docker (or set DOCKER=podman), or buildah" >&2; exit 1; }; \
	  $(DOCKER) build --target full -t triton-stack/gateway-full:$(VERSION) . && \
	  $(DOCKER) build -t triton-stack/gateway:$(VERSION) . && \
	  $(BIN)/python -m tools.sbom --engine docker --tag triton-stack/gateway-full:$(VERSION) && \
	  $(BIN)/python -m tools.sbom --engine docker --tag triton-stack/gateway:$(VERSION); \
	fi

# Build the image with buildah (no daemon) and run its own entrypoint against a real Triton and
# Feast store started here: /readyz, the same prediction as the source tree's gateway, uid 10001,
# the HEALTHCHECK, no compiler or pip cache, the serving image under 300 MB. Installs buildah and mmdebstrap
# (Debian packages) when root. docs/release.md, "The gateway image", has the timings.
image-check: setup
	$(BIN)/python -m tools.image_check check --tag triton-stack/gateway:$(VERSION)

clean:
	rm -rf $(VENV) .runtime .demo
