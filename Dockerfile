# node-requests-agent container image: runtime dependencies only, non-root, every package hash-checked.
# Build: docker build -t node-requests-agent:0.1.0 .
# Pin the base by digest at build time (docs/deployment.md):
#   docker build --build-arg PYTHON_IMAGE=python:3.11.7-slim-bookworm@sha256:<digest> -t node-requests-agent:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
COPY pyproject.toml README.md ./
COPY agent ./agent
# The locks hold every runtime package and the build backend with their hashes; the project itself is
# built without an isolated (unpinned) build environment and installed without resolving anything.
RUN python -m venv /opt/agent \
 && /opt/agent/bin/pip install --no-cache-dir --require-hashes -r requirements.lock -r requirements-build.lock \
 && /opt/agent/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
 && /opt/agent/bin/pip uninstall -y pip setuptools

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/agent /opt/agent
# A fixed non-root uid/gid, matching the DaemonSet's securityContext.
USER 65532:65532
ENV PATH=/opt/agent/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 9808
# `docker run IMAGE` runs the agent; `docker run IMAGE explain` or `--version` work too. The DaemonSet sets no
# command or args, so the container runs ENTRYPOINT + CMD.
ENTRYPOINT ["node-requests-agent"]
CMD ["run"]
