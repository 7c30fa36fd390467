# Calibration job image: CPU torch, every Python package from the hash-locked wheelhouse, no
# network needed to build (`docker build --network none`) or to run (`docker run --network none`).
#
#   make wheelhouse && make image            # see Makefile; or by hand:
#   docker build --network none --build-arg BASE_IMAGE=calibration-base:bookworm -t calibration-job .
#
# BASE_IMAGE: any Debian bookworm image with `python3` (3.11) and its venv module on PATH.
#  - python:3.11-slim-bookworm (python3 in /usr/local/bin). For a reproducible build pin the
#    digest, e.g. --build-arg BASE_IMAGE=python:3.11-slim-bookworm@sha256:<digest of the index>
#    (`docker buildx imagetools inspect python:3.11-slim-bookworm` prints it).
#  - calibration-base:bookworm from scripts/base-image.sh: debootstrap minbase + python3 3.11.2,
#    python3-venv, ca-certificates (python3 in /usr/bin). Used where no registry is reachable.
# Both stages use the same BASE_IMAGE, so /opt/venv's interpreter path is the same in each.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- stage 1: the virtual environment, from the wheelhouse only ------------------------------
FROM ${BASE_IMAGE} AS venv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1 PIP_CONFIG_FILE=/dev/null \
    PYTHONDONTWRITEBYTECODE=1
COPY requirements.lock /tmp/requirements.lock
COPY wheelhouse/ /wheelhouse/
# --no-index: nothing but /wheelhouse; --require-hashes: each file must match requirements.lock.
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/python -m pip install --no-index --find-links /wheelhouse \
        --require-hashes --only-binary=:all: -r /tmp/requirements.lock \
 && /opt/venv/bin/python -m pip check \
 && /opt/venv/bin/python -c 'import torch; assert torch.__version__.endswith("+cpu"), torch.__version__'

# ---- stage 2: the runtime image (no wheelhouse in any layer) ---------------------------------
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="calibration-job" \
      org.opencontainers.image.description="Deterministic temperature-scaling calibration run with a signed bundle" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --gid 10001 calib \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin calib \
 && mkdir -p /cache /out /keys /tmp/matplotlib \
 && chown calib:calib /cache /out /tmp/matplotlib

COPY --from=venv /opt/venv /opt/venv
WORKDIR /app
COPY pyproject.toml provenance.json ./
COPY schemas/ ./schemas/
COPY bundle/ ./bundle/
COPY verify/ ./verify/
COPY job/ ./job/

# Declared late so that a new value (the Makefile passes the last commit's time) does not
# invalidate the venv layer above.
ARG SOURCE_DATE_EPOCH=1767225600
ARG CALIBRATION_IMAGE=calibration-job
# The commit the COPYed sources come from (`-dirty` if they differ from it); the job records it.
ARG CALIBRATION_GIT_COMMIT=
# job/locks/standin.json names files as ../../../shared/fixtures/...; relative to /app/job/
# locks that is /shared/fixtures, where `make run`/docker-test mount the fixtures read-only.
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    VIRTUAL_ENV=/opt/venv \
    PYTHONPATH=/app \
    PYTHONHASHSEED=0 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=4 \
    MKL_NUM_THREADS=4 \
    HF_HOME=/cache \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    LANG=C.UTF-8 \
    TZ=UTC \
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH} \
    CALIBRATION_IMAGE=${CALIBRATION_IMAGE} \
    CALIBRATION_GIT_COMMIT=${CALIBRATION_GIT_COMMIT}

USER 10001:10001
VOLUME ["/cache", "/out", "/keys"]
ENTRYPOINT ["python", "-m", "job"]
CMD ["--help"]
