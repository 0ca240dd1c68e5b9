# syntax=docker/dockerfile:1.7
# The image of every Coffer service, one service per build: edge (the public API, 8080, with
# metrics and health on 9080), auth (8081), metadata (8082) or blob (8083, and the CDN
# listener on 8090, which the chart runs as the cdn component with `serve --role cdn`).
#
# Build from the repository root (the uv workspace), naming the service; tag it with the
# chart's appVersion (charts/coffer/Chart.yaml), which is the chart's default tag:
#   docker build --build-arg SERVICE=edge -t coffer-edge:0.1.0 .
# Only coffer-<SERVICE> and coffer-kit with their locked dependencies go into the image; no
# secrets are baked in (the chart passes them as environment variables at run time). The
# listen ports are the services' defaults, which the chart sets again (so no EXPOSE here).
#
# tests/packaging replays the builder stage without an engine, so keep its COPY and
# `uv sync` lines plain; `make test-images` builds and runs all four with podman.

# Pinned by version; pin by digest too (@sha256:...) where your registry policy asks for it.
# The uv version is also the range of `uv_build` in every workspace member's build-system:
# with a matching uv, uv builds the members itself, so no build backend is fetched unlocked.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.9

FROM ${UV_IMAGE} AS uv

FROM ${PYTHON_IMAGE} AS builder
ARG SERVICE
RUN case "${SERVICE}" in edge|auth|metadata|blob) ;; \
    *) echo "--build-arg SERVICE must be edge, auth, metadata or blob (got '${SERVICE}')" >&2; exit 1;; esac
COPY --from=uv /uv /usr/local/bin/uv
# Compile bytecode now: the runtime root filesystem is read-only. Copy out of the cache
# mount rather than hard-link. Use the image's Python 3.11, never a downloaded one.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON_PREFERENCE=only-system \
    UV_PYTHON=3.11 \
    UV_PROJECT_ENVIRONMENT=/app/.venv
WORKDIR /src

# Dependency layer: the lock and the root pyproject are all uv needs with --frozen, so this
# layer is rebuilt only when uv.lock changes, not on every source edit. Bind-mount targets
# are absolute: buildah (podman build) refuses relative ones.
RUN --mount=type=cache,target=/root/.cache/uv \
    --mount=type=bind,source=uv.lock,target=/src/uv.lock \
    --mount=type=bind,source=pyproject.toml,target=/src/pyproject.toml \
    uv sync --frozen --no-dev --no-install-workspace --package coffer-${SERVICE}

# Then the two workspace members this service is made of, installed as real (non-editable)
# packages so the runtime stage needs nothing but the virtualenv. Offline: every dependency
# is in the layer above and uv builds the members itself, so nothing unlocked comes in.
COPY pyproject.toml uv.lock ./
COPY libs/kit libs/kit
COPY services/${SERVICE} services/${SERVICE}
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --offline --no-dev --no-editable --package coffer-${SERVICE}
# One entrypoint name for every image (exec-form ENTRYPOINT cannot expand a build argument).
RUN ln -s coffer-${SERVICE} /app/.venv/bin/coffer-service

# Development image, for skaffold's `dev` profile on kind only (`--target dev`): the
# workspace members installed editable from /src, which skaffold's file sync updates, and
# `serve` restarted by watchfiles on every change. The default target (runtime, last) is
# the production image.
FROM builder AS dev-builder
ARG SERVICE
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --offline --no-dev --package coffer-${SERVICE}

FROM ${PYTHON_IMAGE} AS dev
# libmagic1: blob reads each upload's media type with it (issue 48, python-magic).
RUN (ldconfig -p | grep -q libmagic.so.1 || { apt-get update \
      && apt-get install -y --no-install-recommends libmagic1 && rm -rf /var/lib/apt/lists/*; }) \
    && groupadd --system --gid 10001 coffer \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin coffer
COPY --from=dev-builder /app/.venv /app/.venv
COPY --from=dev-builder --chown=10001:10001 /src /src
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    COFFER_DATA_DIR=/tmp/coffer
WORKDIR /app
USER 10001:10001
ENTRYPOINT ["/bin/sh", "-c", "if [ \"$1\" = serve ]; then exec watchfiles --target-type command --filter python \"coffer-service $*\" /src; else exec coffer-service \"$@\"; fi", "coffer-service"]
CMD ["serve"]

FROM ${PYTHON_IMAGE} AS runtime
# libmagic1: blob reads each upload's media type with it (issue 48, python-magic).
RUN (ldconfig -p | grep -q libmagic.so.1 || { apt-get update \
      && apt-get install -y --no-install-recommends libmagic1 && rm -rf /var/lib/apt/lists/*; }) \
    && groupadd --system --gid 10001 coffer \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin coffer
COPY --from=builder /app/.venv /app/.venv
# Listen on every interface inside the pod (each service reads only its own *_HOST); the
# data dir (SQLite, local secrets) is unused in production mode but points at /tmp, the
# only writable path (an emptyDir in the chart).
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    COFFER_EDGE_HOST=0.0.0.0 \
    COFFER_AUTH_HOST=0.0.0.0 \
    COFFER_METADATA_HOST=0.0.0.0 \
    COFFER_BLOB_HOST=0.0.0.0 \
    COFFER_CDN_HOST=0.0.0.0 \
    COFFER_DATA_DIR=/tmp/coffer
WORKDIR /app
# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 10001:10001
# The service's own command (coffer-service links to coffer-<SERVICE>): it serves with
# uvicorn and drains in-flight requests on SIGTERM (exec form, so the signal reaches it).
# The chart passes `migrate` to hook Jobs, `serve --role cdn` to the cdn component.
ENTRYPOINT ["coffer-service"]
CMD ["serve"]
