# syntax=docker/dockerfile:1
# The gateway image (`make image`): `gateway serve` on HTTP 8080 and gRPC 50051, with the Feast
# feature repository at /app/feature_repo. The Helm chart deploys it as triton-stack/gateway:<appVersion>.
#
# Two stages: `build` installs requirements/gateway.lock (the gateway's subset of project.lock,
# wheels only) and the project into /opt/venv; the final stage copies that venv onto a clean
# slim base, so it carries no compiler, no build backend and no pip cache.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# uv installs the locks (as `make venv` does), trusting the CA bundle pip's settings name (a
# TLS-inspecting proxy's: `make image-check` mounts them); INSTALLER=pip uses pip, for a build
# whose index only pip's settings reach (uv does not read pip.conf's indexes).
ARG INSTALLER=uv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/bootstrap.lock requirements/gateway.lock requirements/
# Build tools in a venv of their own that the final stage leaves behind: bootstrap.lock's pip,
# setuptools (the project's build backend) and uv, hashed like every lock.
RUN python -m venv /opt/tools \
 && /opt/tools/bin/pip install --no-cache-dir --require-hashes -r requirements/bootstrap.lock \
 && python -m venv /opt/venv
# --require-hashes + --no-deps + pip check: exactly the locked bytes (every pin carries the sha256
# of its files), and the build fails if a requirement is missing from the lock.
RUN if [ "$INSTALLER" = pip ]; then \
      /opt/venv/bin/pip install --no-cache-dir --require-hashes --no-deps --only-binary=:all: \
        -r requirements/gateway.lock; \
    else \
      cert="$(/opt/tools/bin/pip config get global.cert 2>/dev/null || true)"; \
      ${cert:+env SSL_CERT_FILE="$cert"} /opt/tools/bin/uv pip install --no-cache \
        --python /opt/venv/bin/python --compile-bytecode --require-hashes --no-deps \
        --only-binary :all: -r requirements/gateway.lock; \
    fi \
 && /opt/venv/bin/pip check
COPY pyproject.toml README.md ./
COPY gateway gateway
COPY serving_contract serving_contract
COPY feast_access feast_access
COPY feature_repo feature_repo
# The project itself (the `gateway` command, the serving contract it reads, feast_access, the
# demo's feature_repo); only those four packages are in the context. Its wheel is built with the
# tools venv's hashed setuptools (no isolated build env fetching an unpinned one).
# No second `pip check`: the project's metadata names the whole stack (mlflow, onnx, locust...),
# which the image leaves out on purpose; `gateway --help` proves the command imports instead.
RUN /opt/tools/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation -w /tmp/wheel . \
 && /opt/venv/bin/pip install --no-cache-dir --no-deps /tmp/wheel/*.whl \
 && /opt/venv/bin/gateway --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="triton-stack gateway" \
      org.opencontainers.image.description="Feast online features + one Triton call, over HTTP and gRPC"
# The uid/gid the chart's podSecurityContext runs as (runAsNonRoot needs a numeric USER to check).
RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gateway
COPY --from=build /opt/venv /opt/venv
# Definitions and profiles only: .dockerignore keeps feature_repo/data (generated) out.
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
# slim has no curl: the standard library asks /healthz (urlopen raises on a non-2xx answer).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GATEWAY_PORT', '8080') + '/healthz', timeout=2)"]
ENTRYPOINT ["gateway"]
CMD ["serve", "--host", "0.0.0.0"]
