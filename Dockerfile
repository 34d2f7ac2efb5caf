# countersign: `countersign serve` in a slim image, as a non-root user, healthy when GET /readyz says ready.
# Build: docker build -t countersign .   Run: docker run -p 3000:3000 -v countersign-data:/data countersign
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY adapters ./adapters
COPY storage ./storage
RUN python -m venv /opt/countersign \
    && /opt/countersign/bin/pip install --no-cache-dir --disable-pip-version-check .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /data --create-home countersign
COPY --from=build /opt/countersign /opt/countersign
ENV PATH=/opt/countersign/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    COUNTERSIGN_DB=/data/countersign.db \
    COUNTERSIGN_LOG_FORMAT=json
USER countersign
WORKDIR /data
VOLUME ["/data"]
EXPOSE 3000
# No curl in a slim image: Python asks /readyz (503 while the database or a surface is not usable).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:3000/readyz', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["countersign", "serve"]
CMD ["--host", "0.0.0.0", "--port", "3000"]
