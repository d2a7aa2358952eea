# syntax=docker/dockerfile:1
# The gateway's two images, two targets of this file (docs/release.md, "The gateway image"):
#
#   docker build -t triton-stack/gateway:<v> .
#       the serving image (the last stage, the default): `gateway serve` on HTTP 8080 and gRPC
#       50051, reading the online store from feature specs compiled elsewhere (GATEWAY_FEATURE_SPECS);
#       no Feast, pandas, pyarrow, SQLAlchemy or dask. What the chart's gateway container runs.
#   docker build --target full -t triton-stack/gateway-full:<v> .
#       the full image: the same gateway plus Feast's closure and the demo's feature repository at
#       /app/feature_repo. What the chart's init containers run (the registry's apply and
#       `gateway compile-features --out /specs`), and the gateway itself where the payload log is on.
#
# Stages: `deps` installs requirements/gateway.lock (the serving process's packages, wheels only)
# into /opt/venv, `deps-full` adds requirements/gateway-full.lock on top; `build` and `build-full`
# install the project's wheel into each; the two final stages copy a venv onto a clean slim base,
# with no compiler, build backend, pip or cache. The stages the targets share are built once
# (and cached once, by Docker and by buildah --layers alike).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS deps
# uv installs the locks (as `make venv` does), trusting the CA bundle pip's settings name (a
# TLS-inspecting proxy's: `make image-check` mounts them); INSTALLER=pip uses pip, for a build
# whose index only pip's settings reach (uv does not read pip.conf's indexes).
ARG INSTALLER=uv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# binutils for `strip` (below), in this stage only.
RUN apt-get update \
 && apt-get install -y --no-install-recommends binutils=2.40-2 \
 && rm -rf /var/lib/apt/lists/*
COPY requirements/bootstrap.lock requirements/gateway.lock requirements/
# Build tools in a venv of their own that the final stages leave behind: bootstrap.lock's pip,
# setuptools (the project's build backend) and uv, hashed like every lock. The image's venv has
# no pip of its own (--without-pip): the tools venv's pip and uv install into it and check it.
RUN python -m venv /opt/tools \
 && /opt/tools/bin/pip install --no-cache-dir --require-hashes -r requirements/bootstrap.lock \
 && python -m venv --without-pip /opt/venv
# --require-hashes + --no-deps + pip check: exactly the locked bytes (every pin carries the sha256
# of its files), and the build fails if a requirement is missing from the lock. Then the debug
# sections of the packages' own extension modules are stripped (ml_dtypes, uvloop and rapidjson
# ship them: ~45 MB of the serving image); the libraries auditwheel vendored into *.libs/ are
# left alone (patchelf rewrote them, and strip breaks their load commands).
RUN if [ "$INSTALLER" = pip ]; then \
      /opt/tools/bin/pip --python /opt/venv/bin/python install --no-cache-dir --require-hashes \
        --no-deps --only-binary=:all: -r requirements/gateway.lock; \
    else \
      cert="$(/opt/tools/bin/pip config get global.cert 2>/dev/null || true)"; \
      ${cert:+env SSL_CERT_FILE="$cert"} /opt/tools/bin/uv pip install --no-cache \
        --python /opt/venv/bin/python --compile-bytecode --require-hashes --no-deps \
        --only-binary :all: -r requirements/gateway.lock; \
    fi \
 && /opt/tools/bin/pip --python /opt/venv/bin/python check \
 && find /opt/venv -type f -name '*.so' -not -path '*.libs/*' -exec strip --strip-debug {} +

FROM deps AS deps-full
ARG INSTALLER=uv
COPY requirements/gateway-full.lock requirements/
RUN if [ "$INSTALLER" = pip ]; then \
      /opt/tools/bin/pip --python /opt/venv/bin/python install --no-cache-dir --require-hashes \
        --no-deps --only-binary=:all: -r requirements/gateway-full.lock; \
    else \
      cert="$(/opt/tools/bin/pip config get global.cert 2>/dev/null || true)"; \
      ${cert:+env SSL_CERT_FILE="$cert"} /opt/tools/bin/uv pip install --no-cache \
        --python /opt/venv/bin/python --compile-bytecode --require-hashes --no-deps \
        --only-binary :all: -r requirements/gateway-full.lock; \
    fi \
 && /opt/tools/bin/pip --python /opt/venv/bin/python check \
 && find /opt/venv -type f -name '*.so' -not -path '*.libs/*' -exec strip --strip-debug {} +

# The project itself, its wheel built with the tools venv's hashed setuptools (no isolated build
# env fetching an unpinned one). No second `pip check`: the project's metadata names the whole
# stack (mlflow, onnx, locust...), which the images leave out on purpose; `gateway --help`
# proves the command imports instead. The serving image's wheel has the `gateway` command, the
# serving contract it reads and feast_access (whose online readers it uses); the full image's
# also has the demo's feature_repo (Feast definitions), which only .dockerignore's allowlist
# lets into the context.
FROM deps AS build
COPY pyproject.toml README.md ./
COPY gateway gateway
COPY serving_contract serving_contract
COPY feast_access feast_access
RUN /opt/tools/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation -w /tmp/wheel . \
 && /opt/tools/bin/pip --python /opt/venv/bin/python install --no-cache-dir --no-deps /tmp/wheel/*.whl \
 && /opt/venv/bin/gateway --help > /dev/null

FROM deps-full AS build-full
COPY pyproject.toml README.md ./
COPY gateway gateway
COPY serving_contract serving_contract
COPY feast_access feast_access
COPY feature_repo feature_repo
RUN /opt/tools/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation -w /tmp/wheel . \
 && /opt/tools/bin/pip --python /opt/venv/bin/python install --no-cache-dir --no-deps /tmp/wheel/*.whl \
 && /opt/venv/bin/gateway compile-features --help > /dev/null

# The full image: the gateway with Feast, and the demo's feature definitions and profiles
# (.dockerignore keeps feature_repo/data, generated, out).
FROM ${PYTHON_IMAGE} AS full
LABEL org.opencontainers.image.title="triton-stack gateway (full)" \
      org.opencontainers.image.description="The gateway with Feast: compile-features, the payload log, offline reports"
# The uid/gid the chart's podSecurityContext runs as (runAsNonRoot needs a numeric USER to check).
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gateway
COPY --from=build-full /opt/venv /opt/venv
COPY feature_repo /app/feature_repo
WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GATEWAY_FEATURE_REPO=/app/feature_repo \
    GATEWAY_PORT=8080 \
    GATEWAY_GRPC_PORT=50051
USER 10001:10001
EXPOSE 8080 50051
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GATEWAY_PORT', '8080') + '/healthz', timeout=2)"]
ENTRYPOINT ["gateway"]
CMD ["serve", "--host", "0.0.0.0"]

# The serving image (the default target): `gateway serve` with GATEWAY_FEATURE_SPECS, a folder
# `gateway compile-features` wrote (the chart's init container, from the full image). Without it
# the gateway refuses to start, in one line naming both.
FROM ${PYTHON_IMAGE} AS serving
LABEL org.opencontainers.image.title="triton-stack gateway" \
      org.opencontainers.image.description="Feast online features + one Triton call, over HTTP and gRPC"
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gateway
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GATEWAY_PORT=8080 \
    GATEWAY_GRPC_PORT=50051
USER 10001:10001
EXPOSE 8080 50051
# slim has no curl: the standard library asks /healthz (urlopen raises on a non-2xx answer).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GATEWAY_PORT', '8080') + '/healthz', timeout=2)"]
ENTRYPOINT ["gateway"]
CMD ["serve", "--host", "0.0.0.0"]
