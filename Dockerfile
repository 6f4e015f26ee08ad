# The operator image: Python, kopf and the Kubernetes client, no torch. Non-root, nothing written at runtime
# (the chart mounts the root filesystem read-only). Build from the repository root:
#   docker build -t ringleader/operator:0.1.0 .
FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY operator/pyproject.toml operator/pyproject.toml
COPY operator/ringleader_operator operator/ringleader_operator
# The operator's dependencies are pinned in operator/pyproject.toml.
RUN pip install --no-cache-dir --disable-pip-version-check --no-compile --prefix=/install ./operator

FROM python:3.11.14-slim-bookworm
LABEL org.opencontainers.image.title="ringleader-operator" \
      org.opencontainers.image.description="Kubernetes operator for distributed PyTorch training (TrainingJob)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --system --gid 65532 ringleader \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin ringleader
COPY --from=build /install /usr/local
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["ringleader-operator"]
