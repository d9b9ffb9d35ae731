# syntax=docker/dockerfile:1
# tubemq-gateway: one uvicorn worker per container; scale with replicas, not workers.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: install the project and its dependencies into a virtualenv --------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
WORKDIR /src
# Dependencies first, so that a code change does not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir gateway && touch gateway/__init__.py \
    && /opt/venv/bin/pip install . \
    && /opt/venv/bin/pip uninstall -y tubemq-gateway
COPY gateway ./gateway
RUN /opt/venv/bin/pip install --no-deps . \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

# --- runtime: the virtualenv on a clean slim image, as an unprivileged user ---------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG UID=10001
RUN groupadd --system --gid ${UID} gateway \
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
# Liveness only: /readyz would mark the container unhealthy while it drains or waits for a master.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('TUBEMQ_GATEWAY_HTTP_PORT', '8080') + '/healthz', timeout=2)"]
# SIGTERM starts the graceful shutdown (see README, "Operating it").
STOPSIGNAL SIGTERM
ENTRYPOINT ["tubemq-gateway"]
CMD ["serve"]
