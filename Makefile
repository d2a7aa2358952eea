# Front door: `make demo` and `make test` each set everything up from a fresh clone, then run.
# Setup is idempotent and cached: the venv is rebuilt only when the lock file changes, and the
# embedded Triton runtime only when its pins change (`builder runtime install` checks a stamp).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The venv stamp carries the lock's hash, so editing the lock rebuilds the environment.
LOCK_HASH := $(shell sha256sum requirements/project.lock pyproject.toml | sha256sum | cut -c1-12)
VENV_STAMP := $(VENV)/.installed-$(LOCK_HASH)
export BUILDER_RUNTIME_DIR ?= $(CURDIR)/.runtime
PYTEST_ARGS ?=
# Two workers, one per core: a test file runs whole in one worker (tests/conftest.py says why
# loadfile); much of a test's time is single-threaded Python (training, conversion, parity), so
# two of them cut the wall time. PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 2

.PHONY: setup venv runtime redis wrk chromium test demo bench gpu-check lint image clean help

help:
	@echo "make demo   - set up, then train -> register -> export -> serve -> predict -> gate -> drift"
	@echo "make test   - set up, then run every test (unit and integration, real servers)"
	@echo "make bench  - set up, then run the benchmarks (writes benchmarks/results/)"
	@echo "make gpu-check - on a GPU machine: install the gpu extra, run the gpu tests and bench (d)"
	@echo "make lint   - ruff and mypy"
	@echo "make image  - docker build the gateway image the Helm chart deploys (triton-stack/gateway:VERSION)"

setup: venv runtime redis

venv: $(VENV_STAMP)

$(VENV_STAMP): requirements/project.lock pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python 3.11+ is required"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.3"
	$(BIN)/python -m pip install --quiet -r requirements/project.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-*
	touch $@

runtime: venv
	$(BIN)/builder runtime install

# The Feast Redis profile is tested against a real redis-server (Debian package redis-server).
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; \
	  else echo "redis-server is missing: sudo apt-get install redis-server (Debian/Ubuntu) or brew install redis" >&2; exit 1; fi; }

# make bench's peer comparison (f) drives Triton and MLServer with wrk (Debian package wrk).
wrk:
	@command -v wrk >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq wrk >/dev/null; \
	  else echo "wrk is missing: sudo apt-get install wrk (Debian/Ubuntu) or brew install wrk" >&2; exit 1; fi; }

# The HTML reports (drift, quality) are opened in a real headless browser by the tests
# (Debian package chromium).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	  else echo "chromium is missing: sudo apt-get install chromium (Debian/Ubuntu)" >&2; exit 1; fi; }

test: setup chromium lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

demo: setup
	$(BIN)/python demo/run_demo.py

bench: setup wrk
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

# The gateway image; its tag is the chart's appVersion, which is what the chart pulls by default.
DOCKER ?= docker
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}.*/\1/p' helm/triton-stack/Chart.yaml)
image:
	@command -v $(DOCKER) >/dev/null 2>&1 || { echo "make image: $(DOCKER) not found on PATH: install Docker (or set DOCKER=podman)" >&2; exit 1; }
	$(DOCKER) build -t triton-stack/gateway:$(VERSION) .

clean:
	rm -rf $(VENV) .runtime .demo
