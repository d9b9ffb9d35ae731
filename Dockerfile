# syntax=docker/dockerfile:1
# tubemq-gateway: `serve` runs one worker process per CPU the container may use (TUBEMQ_GATEWAY_WORKERS).
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t tubemq-gateway:0.1.0 .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: install the project and its dependencies into a virtualenv --------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
# A C compiler for the compiled per-message loops (setup.py; the image has Python's headers). It stays in
# this stage: the runtime image gets the built extension, not gcc. Debian's current gcc of the base image's
# release (a pinned version would break with its next point release).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
# The venv's own pip and setuptools, current (the base image's lag behind); both leave the image below.
RUN --mount=type=cache,target=/root/.cache/pip \
    python -m venv /opt/venv \
    && /opt/venv/bin/pip install --upgrade "pip>=25.1" "setuptools>=77"
WORKDIR /src
# Dependencies first, from pyproject.toml alone: a README or code change does not reinstall them.
COPY pyproject.toml ./
# Optional extras baked into the image, comma-separated: otel (OpenTelemetry, for tracing.enabled); "" for none.
ARG EXTRAS=otel
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/venv/bin/python -c "import os, tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies'] + [d for e in os.environ['EXTRAS'].split(',') if e.strip() for d in p['optional-dependencies'][e.strip()]]))" \
       > /tmp/requirements.txt \
    && /opt/venv/bin/pip install -r /tmp/requirements.txt
# The project itself; setuptools reads README.md (the readme of pyproject.toml), so it comes here, and
# setup.py, which builds the C extensions. The build fails unless the image runs the compiled path.
COPY README.md setup.py ./
COPY gateway ./gateway
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/venv/bin/pip install --no-deps --no-build-isolation . \
    && /opt/venv/bin/python -c "from gateway.tubemq.wire import speedups as s; assert s.ACTIVE == s.COMPILED, s.REASON; missing = [n for n in s.EXTENSIONS if s.load_extension(n) is None]; assert not missing, missing" \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
    && /opt/venv/bin/pip uninstall --yes setuptools pip

# --- runtime: the virtualenv on a clean slim image, as an unprivileged user ---------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=""
ARG CREATED=""
LABEL org.opencontainers.image.title="tubemq-gateway" \
      org.opencontainers.image.description="HTTP/gRPC gateway for Apache InLong TubeMQ" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.url="https://github.com/tubemqgateway/tubemq-gateway" \
      org.opencontainers.image.source="https://github.com/tubemqgateway/tubemq-gateway" \
      org.opencontainers.image.documentation="https://github.com/tubemqgateway/tubemq-gateway/tree/main/docs"
ARG UID=10001
# No pip or setuptools in the image: the system Python's are removed too (nothing installs at run time).
RUN PIP_ROOT_USER_ACTION=ignore python -m pip uninstall --yes pip setuptools wheel \
    && groupadd --system --gid ${UID} gateway \
    && useradd --system --uid ${UID} --gid gateway --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gateway
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TUBEMQ_GATEWAY_HTTP_HOST=0.0.0.0 \
    TUBEMQ_GATEWAY_HTTP_PORT=8080 \
    TUBEMQ_GATEWAY_LOG_FORMAT=json
USER ${UID}:${UID}
WORKDIR /tmp
EXPOSE 8080 9090
# Liveness only: /readyz would mark the container unhealthy while it drains or waits for a master. The check
# reads the TUBEMQ_GATEWAY_* settings as serve does: https with tls.cert_file, the admin listener with
# admin.port (gateway/healthcheck.py). -P: only the installed package is imported, never one in WORKDIR.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-P", "-m", "gateway.healthcheck"]
# SIGTERM starts the graceful shutdown (see docs/operations.md, "Shutdown").
STOPSIGNAL SIGTERM
ENTRYPOINT ["tubemq-gateway"]
CMD ["serve"]
