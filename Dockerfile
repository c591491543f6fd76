# node-requests-agent container image: only what runs (an interpreter, the libraries it links, the agent's venv),
# non-root, every package hash-checked, bytecode for exactly what the agent imports at start.
# Build: docker build -t node-requests-agent:0.1.0 .
# Pin the base by digest at build time (docs/deployment.md):
#   docker build --build-arg PYTHON_IMAGE=python:3.11.7-slim-bookworm@sha256:<digest> -t node-requests-agent:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
COPY pyproject.toml README.md ./
COPY image ./image
COPY agent ./agent
# The locks hold every runtime package and the build backend with their hashes: installed as pinned, nothing
# resolved (--no-deps), then image/locked.py fails the build unless the venv is exactly what the locks pin (a
# dependency a lock lacks would otherwise just be missing). The project itself is built without an isolated
# (unpinned) build environment.
RUN python -m venv /opt/agent \
 && /opt/agent/bin/pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock -r requirements-build.lock \
 && /opt/agent/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
 && /opt/agent/bin/python image/locked.py requirements.lock requirements-build.lock \
 && /opt/agent/bin/pip uninstall -y pip setuptools
# The runtime root filesystem (interpreter, linked libraries, standard library) and the bytecode of exactly what
# `node-requests-agent run` imports at start (image/runtime.py).
RUN /opt/agent/bin/python image/runtime.py /opt/agent /rootfs

FROM scratch
COPY --from=build /rootfs /
COPY --from=build /opt/agent /opt/agent
# A fixed non-root uid/gid, matching the DaemonSet's securityContext.
USER 65532:65532
ENV PATH=/opt/agent/bin:/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 9808
# `docker run IMAGE` runs the agent; `docker run IMAGE explain` or `--version` work too. The DaemonSet sets no
# command or args, so the container runs ENTRYPOINT + CMD. There is no shell: `kubectl exec POD -- python -c ...`.
ENTRYPOINT ["node-requests-agent"]
CMD ["run"]
