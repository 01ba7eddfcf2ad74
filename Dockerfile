# mcp-loop-guard serving streamable HTTP in front of the servers listed in /config/mcp.json.
# Build:  docker build -t mcp-loop-guard .
# Run:    docker run -p 8080:8080 -v "$PWD/configs:/config:ro" mcp-loop-guard

FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels . mcp-server-time

FROM python:3.12-slim
# tini as PID 1 reaps the stdio servers' children and forwards SIGTERM.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
RUN useradd --create-home --uid 10001 guard
COPY configs/mcp.json /config/mcp.json
USER guard
ENV PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["tini", "--", "mcp-loop-guard"]
CMD ["--transport", "http", "--host", "0.0.0.0", "--port", "8080", "--config", "/config/mcp.json"]
