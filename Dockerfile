# The operator image: Python, kopf and the Kubernetes client, no torch. Non-root, nothing written at runtime
# (the chart mounts the root filesystem read-only). Build from the repository root:
#   docker build -t ringleader/operator:0.1.0 .
# BASE_IMAGE may be any Debian-based image with Python 3.11 and its venv module; without Docker, `make images`
# builds with buildah on a base image made locally (devcluster/ringleader_devcluster/images.py).
ARG BASE_IMAGE=python:3.11.14-slim-bookworm
FROM ${BASE_IMAGE} AS build
# A virtual environment: the same layout on python:slim and on a distribution's Python (whose system
# site-packages pip may not write), copied whole into the runtime stage.
RUN python -m venv /opt/venv
WORKDIR /src
COPY api/pyproject.toml api/pyproject.toml
COPY api/ringleader_api api/ringleader_api
COPY operator/pyproject.toml operator/pyproject.toml
COPY operator/ringleader_operator operator/ringleader_operator
# The operator's dependencies are pinned in operator/pyproject.toml; the API models are a package of their own.
RUN /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-compile ./api ./operator

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="ringleader-operator" \
      org.opencontainers.image.description="Kubernetes operator for distributed PyTorch training (TrainingJob)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 65532 ringleader \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin ringleader
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["ringleader-operator"]
