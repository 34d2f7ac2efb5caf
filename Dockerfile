# countersign: `countersign serve` in a slim image, as a non-root user, healthy while GET /healthz answers.
# Build: docker build -t countersign .   Run: docker run -p 3000:3000 -v countersign-data:/data countersign
# Base images by tag: pin them by digest (FROM python:3.11-slim@sha256:...) where a registry is reachable;
# see docs/deployment.md. The port is COUNTERSIGN_PORT (default 3000), read by the server and the health check.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY bot ./bot
COPY adapters ./adapters
COPY storage ./storage
# Every dependency from the hashed lock file (pip refuses anything else), then countersign itself alone.
RUN python -m venv /opt/countersign \
    && /opt/countersign/bin/pip install --no-cache-dir --disable-pip-version-check --require-hashes -r requirements.lock \
    && /opt/countersign/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /data --create-home countersign
COPY --from=build /opt/countersign /opt/countersign
ENV PATH=/opt/countersign/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    COUNTERSIGN_DB=/data/countersign.db \
    COUNTERSIGN_LOG_FORMAT=json \
    COUNTERSIGN_HOST=0.0.0.0 \
    COUNTERSIGN_PORT=3000
USER countersign
WORKDIR /data
VOLUME ["/data"]
EXPOSE 3000
# Liveness, not readiness: a Slack or database outage must not mark every replica unhealthy at once (the
# load balancer asks /readyz). No curl in a slim image: Python asks /healthz on the configured port.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('COUNTERSIGN_PORT') or '3000'; sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]
# sh expands the host and port; exec makes countersign the process that gets SIGTERM (compose adds init).
ENTRYPOINT ["sh", "-c", "exec countersign serve --host \"$COUNTERSIGN_HOST\" --port \"$COUNTERSIGN_PORT\" \"$@\"", "countersign"]
