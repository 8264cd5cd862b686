# The lorarl operator image: `lorarl run --all-namespaces` as a non-root user, and the jobs' tools
# image (the reporter zipapp and sidecar, `lorarl run --tools-image`), from the repository root as
# build context:
#
#   docker build -t lorarl:0.1.0 --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE=https://<your git host>/<repo> .
#
# The base is pinned by its full version tag (not by digest, so rebuilds pick up Debian and CPython
# patch releases of the same 3.11 / bookworm line; pin a digest in your own build for bit-for-bit
# reproducibility). Both stages use the same base, so the virtualenv's python symlink stays valid.
# Any Debian-style base with python3 works: `lorarl-dev images build operator` passes one made
# from Debian packages (python3 at /usr/bin, no pip of its own: see hack/image/install.sh).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---------------------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# only what the wheel is built from (see .dockerignore): pyproject, README, operator/
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY hack/image/exporter-requirements.txt hack/image/
COPY hack/image/install.sh /usr/local/bin/lorarl-install
RUN lorarl-install /src /opt/venv /tmp/wheels /opt/exporter

# ------------------------------------------------------------------------------------------ final
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
# the repository URL (no default: the project has not published one)
ARG SOURCE
LABEL org.opencontainers.image.title="lorarl" \
      org.opencontainers.image.description="Kubernetes operator for LoRA RL runs (miles GRPO) on AMD Instinct GPUs via KubeRay" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# A passwd entry for the numeric user: kopf names its peering identity after getpass.getuser(),
# which fails for a uid without one (unless POD_ID is set). The base's own pip/setuptools/wheel go
# (when it has them: the Debian-made base has none): the operator's venv does not see them, and an
# image without installers is easier to audit.
RUN groupadd --system --gid 65532 lorarl \
 && useradd --system --no-log-init --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin lorarl \
 && if python3 -m pip --version >/dev/null 2>&1; then python3 -m pip uninstall --yes --no-cache-dir pip setuptools wheel; fi
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /opt/exporter /opt/exporter
# No bytecode written at run time (pip compiled it at install), unbuffered logs, HOME in /tmp:
# the container runs with readOnlyRootFilesystem and an emptyDir at /tmp.
# `python3` is the export pod's interpreter (/opt/exporter: botocore and oras for the s3 and oci
# destinations, `python3 exporter.pyz`, docs/adapters.md); `lorarl` is /opt/venv's entry point,
# which runs /opt/venv's python by its absolute shebang; the reporter sidecar names
# /opt/venv/bin/python3 (lorarl.job.render.TOOLS_PYTHON).
ENV PATH=/opt/exporter/bin:/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# The image is also the jobs' tools image: the Ray head's init container copies the reporter
# zipapp from this fixed path (lorarl.job.paths.TOOLS_REPORTER_PATH), built from the same source
RUN /opt/venv/bin/python3 -m lorarl.job.artifact /opt/lorarl-tools/reporter.pyz
USER 65532:65532
WORKDIR /tmp
# liveness (kopf) and Prometheus metrics
EXPOSE 8080 9090
ENTRYPOINT ["lorarl"]
CMD ["run", "--all-namespaces"]
