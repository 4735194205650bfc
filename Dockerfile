# syntax=docker/dockerfile:1
# The llmbackend operator image (also runs the topology reporter DaemonSet).
#
#   docker build -t ghcr.io/llmbackend/operator:0.1.0 .
#
# The tag is the package version (operator/llmbackend/__init__.py), which the Helm chart's appVersion and the
# kustomize bundle also carry; docs/release.md is the release procedure.
# NOTE: not built in this repository's CI/dev environment -- there is no Docker/container engine
# there. The chart and manifests/default reference ghcr.io/llmbackend/operator:0.1.0; override
# with the chart's image.repository/image.tag or kustomize `images:` after building and pushing your own.

# llmb-exec (launcher/): multi-node TensorRT-LLM leaders copy it from this image (an init container) to start MPI
# ranks in their workers through the pods' exec subresource (LAUNCHER_EXEC in api/v1alpha1.py). Static, no cgo.
FROM golang:1.26 AS launcher
WORKDIR /src
COPY launcher/go.mod launcher/go.sum launcher/main.go ./
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/llmb-exec .

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY operator ./operator
# Install into an isolated prefix that the runtime stage copies as a whole.
RUN python -m venv /opt/llmbackend \
 && /opt/llmbackend/bin/pip install --upgrade pip \
 && /opt/llmbackend/bin/pip install .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="llmbackend-operator" \
      org.opencontainers.image.description="Kubernetes operator serving LLMs on Triton Inference Server with TensorRT-LLM" \
      org.opencontainers.image.source="https://github.com/llmbackend/llmbackend" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/llmbackend/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=build /opt/llmbackend /opt/llmbackend
COPY --from=launcher /out/llmb-exec /opt/llmbackend/bin/llmb-exec
# Non-root (matches runAsUser 65532 in the manifests); no home directory writes needed,
# the root filesystem is mounted read-only and /tmp is an emptyDir.
RUN groupadd --system --gid 65532 llmbackend \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin llmbackend
USER 65532:65532
WORKDIR /tmp
EXPOSE 9090 8081
ENTRYPOINT ["llmbackend"]
CMD ["run", "--leader-elect", "--metrics-addr=0.0.0.0:9090", "--health-addr=0.0.0.0:8081"]
