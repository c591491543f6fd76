# node-requests-agent container image: runtime dependencies only, non-root.
# Build: docker build -t node-requests-agent:0.1.0 .
FROM python:3.11.7-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent ./agent
RUN python -m venv /opt/agent \
 && /opt/agent/bin/pip install --no-cache-dir . \
 && /opt/agent/bin/pip uninstall -y pip setuptools

FROM python:3.11.7-slim-bookworm
COPY --from=build /opt/agent /opt/agent
# A fixed non-root uid/gid, matching the DaemonSet's securityContext.
USER 65532:65532
ENV PATH=/opt/agent/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 9808
ENTRYPOINT ["node-requests-agent", "run"]
