# lograft node image: runs `lograft node --config /etc/lograft/node.toml`.
#
#   docker build -t lograft .
#   docker run -p 9091:9091 -v lograft-data:/var/lib/lograft \
#       -e LOGRAFT_CFG_CLUSTER_SECRET=$(openssl rand -hex 16) lograft        # one node
#   docker compose up -d                                                 # three (compose.yaml)
#
# The config format is the same TOML as outside a container (see
# lograft/node/config.py); LOGRAFT_CFG_* environment variables override it.
# Inside a container set [http] host = "0.0.0.0" and advertised_url to the URL
# the other nodes dial (e.g. "http://node-1:9091"): a broker registers that
# URL, not its listen address. A node refuses to start without a cluster secret
# of 16+ characters (LOGRAFT_CFG_CLUSTER_SECRET): it keys the Raft links.
#
# BASE_IMAGE must be a Debian-based image with Python 3.11+ (python3 -m venv
# and apt-get). Without a registry, build from a local one:
#   podman build --isolation chroot --build-arg BASE_IMAGE=localhost/debian-python:bookworm .
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
# A C compiler for the optional record-batch scanner (lograft.protocol._recordscan);
# python3-dev only where the base image has no Python headers of its own.
RUN set -eux; \
    pkgs="gcc libc6-dev"; \
    inc="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"; \
    [ -e "$inc/Python.h" ] || pkgs="$pkgs python3-dev"; \
    apt-get update; \
    apt-get install -y --no-install-recommends $pkgs; \
    rm -rf /var/lib/apt/lists/*
# Extra pip options, e.g. an offline build from a local wheelhouse made with
# `pip wheel --wheel-dir wheels . setuptools wheel`:
#   --build-arg PIP_INSTALL_OPTS="--no-index --find-links=/src/wheels"
ARG PIP_INSTALL_OPTS=""
WORKDIR /src
# .dockerignore lets in pyproject.toml, setup.py, README.md, lograft/, deploy/, wheels/.
COPY . .
RUN python3 -m venv /opt/lograft \
    && /opt/lograft/bin/pip install --no-cache-dir --disable-pip-version-check \
        $PIP_INSTALL_OPTS . \
    && cd / && /opt/lograft/bin/python -c "import lograft.protocol._recordscan"

FROM ${BASE_IMAGE}
RUN groupadd --system --gid 10001 lograft \
    && useradd --system --uid 10001 --gid lograft --home-dir /var/lib/lograft lograft \
    && mkdir -p /var/lib/lograft /etc/lograft \
    && chown lograft:lograft /var/lib/lograft
COPY --from=build /opt/lograft /opt/lograft
# A single-node config so the image runs alone; compose mounts its own per node.
COPY deploy/single-node.toml /etc/lograft/node.toml
ENV PATH=/opt/lograft/bin:$PATH \
    PYTHONUNBUFFERED=1
USER lograft
VOLUME ["/var/lib/lograft"]
# HTTP API; Raft listens on the address the config's [[voters]] entry names
# (127.0.0.1:19091 in the single-node config, so not reachable from outside).
EXPOSE 9091 19091
# Exec form: lograft is PID 1 and gets SIGTERM itself (controlled shutdown).
ENTRYPOINT ["lograft", "node", "--config", "/etc/lograft/node.toml"]
