# syntax=docker/dockerfile:1
# (BuildKit: `COPY --chmod` below needs it; it is Docker's default builder since 23.0.)
#
# One image for the Pacer services (planner, sender, reconciler, control, intake) and the `pacer` operator CLI.
#
#   docker build -t pacer:0.1.0 .
#   docker run --rm pacer:0.1.0 sender            # pacer-sender
#   docker run --rm pacer:0.1.0 migrate           # pacer migrate
#   docker build --build-arg SERVICE=planner ...  # default service when no argument is given
#
# Configuration comes only from the environment at run time (see docs/configuration.md);
# nothing secret is baked in. In a container the ops server must listen on all
# interfaces: set PACER_<SERVICE>_OPS_HOST=0.0.0.0 (the Helm chart does).

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: install the services and their locked runtime dependencies into a virtualenv ----
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
# Every dependency from the committed locks (`make lock`, checked by `make test`), by hash:
# pip and the build backend first, then the runtime dependencies.
COPY deploy/docker/build.lock deploy/docker/runtime.lock ./
RUN pip install --require-hashes --requirement build.lock \
 && pip install --require-hashes --no-deps --requirement runtime.lock
# The runtime distribution only: the shared library and the services. The developer tools
# (libs/devtools: local infrastructure, fake gateway, demo) are a separate distribution and
# are not copied.
COPY pyproject.toml README.md ./
COPY libs/common ./libs/common
COPY services ./services
RUN pip install --no-deps --no-build-isolation . \
 && pip uninstall --yes pip setuptools wheel packaging

# ---- runtime ----
FROM ${PYTHON_IMAGE} AS runtime

ARG SERVICE=""
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PACER_SERVICE=${SERVICE}

RUN groupadd --system --gid 10001 pacer \
 && useradd --system --uid 10001 --gid pacer --home-dir /home/pacer --create-home --shell /usr/sbin/nologin pacer

COPY --from=build /opt/venv /opt/venv
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/pacer-entrypoint

USER 10001:10001
WORKDIR /home/pacer

# Default ops ports: planner 9101, sender 9102, reconciler 9103; control API 9104; callback intake 9105.
EXPOSE 9101 9102 9103 9104 9105

ENTRYPOINT ["/usr/local/bin/pacer-entrypoint"]
CMD []
