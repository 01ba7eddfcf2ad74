# mcp-loop-guard serving streamable HTTP in front of the servers listed in /config/mcp.json.
# Build:  docker build -t mcp-loop-guard .
# Run:    docker run -p 8080:8080 -v "$PWD/configs:/config:ro" mcp-loop-guard
# Fleets: deploy/compose.yaml and deploy/kubernetes/ run replicas sharing loop state in Valkey or Redis.

FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The redis extra lets replicas share loop state (LOOP_GUARD_STATE=redis://...); otel sends traces (OTEL_*).
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[redis,otel]' mcp-server-time

FROM python:3.12-slim
# tini as PID 1 reaps the stdio servers' children and forwards SIGTERM.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*
# The wheels are mounted for the install only, so they take no room in the image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels 'mcp-loop-guard[redis,otel]' mcp-server-time
# A numeric user, so Kubernetes can check runAsNonRoot without being told the uid.
RUN groupadd --gid 10001 guard && useradd --create-home --uid 10001 --gid 10001 guard
COPY configs/mcp.json /config/mcp.json
USER 10001:10001
ENV PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["tini", "--", "mcp-loop-guard"]
CMD ["--transport", "http", "--host", "0.0.0.0", "--port", "8080", "--config", "/config/mcp.json"]
