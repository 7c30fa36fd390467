#!/usr/bin/env bash
# Run `python -m job ARGS...` in the calibration image, with no network, a read-only root
# filesystem and no capabilities. Used by `make run`, `make docker-smoke` and docker-test.sh.
#
#   IMAGE=calibration-job:latest OUTDIR=out CACHE=~/.cache/huggingface KEYDIR=keys \
#     scripts/docker-run.sh run --out /out/formal-1 --signing-key /keys/signing-key.pem
#
# Environment (all optional except what the job arguments need):
#   IMAGE     image to run (default calibration-job:latest); CALIBRATION_IMAGE is set to its id
#   OUTDIR    host dir mounted at /out (created if missing)
#   CACHE     host dir mounted at /cache = HF_HOME (the job's default cache is /cache/calibration-runs)
#   KEYDIR    host dir holding signing-key.pem, mounted read-only at /keys
#   FIXTURES  host dir mounted read-only at /shared/fixtures, where job/locks/standin.json's
#             "../../../shared/fixtures/..." paths point from /app/job/resources
#   BUNDLE    host bag folder or .tar.gz, mounted read-only at /bundle/<its name> (for `reproduce`)
#   NETWORK   docker network mode (default none)
#   OUT_RO=1  mount OUTDIR read-only (to check how the job reports an unwritable output volume)
#   ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS
#             passed into the container when set: limit the instruction sets of the arithmetic
#             (for example AVX2, like an AVX2-only machine)
#
# Users: the image runs as calib (uid 10001). When this script runs as root it keeps that user:
# it makes OUTDIR writable for uid 10001 (chown of that one directory) and mounts a private copy
# of the signing key owned by 10001 (the original is 0600 root). When it runs as another user it
# passes --user $(id -u):$(id -g), so files in OUTDIR belong to that user and the key is readable.
set -euo pipefail

IMAGE=${IMAGE:-calibration-job:latest}
NETWORK=${NETWORK:-none}
CALIB_UID=10001

image_id=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null) ||
  { echo "docker-run.sh: image $IMAGE not found; run \`make image\` first." >&2; exit 2; }

args=(--rm --network "$NETWORK" --read-only --tmpfs /tmp:rw,nosuid,nodev,size=2g
      --cap-drop ALL --security-opt no-new-privileges
      -e CALIBRATION_IMAGE="$image_id")
[[ -t 0 && -t 1 ]] && args+=(-t)

cleanup=()
trap 'for d in "${cleanup[@]}"; do rm -rf -- "$d"; done' EXIT

as_root=0; [[ $(id -u) == 0 ]] && as_root=1
(( as_root )) || args+=(--user "$(id -u):$(id -g)")

if [[ -n "${OUTDIR:-}" ]]; then
  mkdir -p "$OUTDIR"
  if [[ "${OUT_RO:-0}" == 1 ]]; then
    args+=(-v "$(realpath "$OUTDIR"):/out:ro")
  else
    if (( as_root )); then chown "$CALIB_UID:$CALIB_UID" "$OUTDIR"; fi
    args+=(-v "$(realpath "$OUTDIR"):/out")
  fi
fi
if [[ -n "${CACHE:-}" ]]; then
  mkdir -p "$CACHE"
  args+=(-v "$(realpath "$CACHE"):/cache")
fi
if [[ -n "${KEYDIR:-}" ]]; then
  keydir=$(realpath "$KEYDIR")
  if (( as_root )); then
    priv=$(mktemp -d /tmp/calib-keys.XXXXXX); cleanup+=("$priv")
    for f in "$keydir"/*.pem; do [[ -e "$f" ]] && install -m 0400 -o "$CALIB_UID" -g "$CALIB_UID" "$f" "$priv/"; done
    chown "$CALIB_UID:$CALIB_UID" "$priv"; chmod 0500 "$priv"
    keydir=$priv
  fi
  args+=(-v "$keydir:/keys:ro")
fi
if [[ -n "${FIXTURES:-}" ]]; then
  args+=(-v "$(realpath "$FIXTURES"):/shared/fixtures:ro")
fi
for isa in ONEDNN_MAX_CPU_ISA ATEN_CPU_CAPABILITY MKL_ENABLE_INSTRUCTIONS; do
  if [[ -n "${!isa:-}" ]]; then args+=(-e "$isa=${!isa}"); fi
done
if [[ -n "${BUNDLE:-}" ]]; then
  [[ -e "$BUNDLE" ]] || { echo "docker-run.sh: bundle $BUNDLE not found; pass BUNDLE=DIR|TAR.GZ." >&2; exit 2; }
  args+=(-v "$(realpath "$BUNDLE"):/bundle/$(basename "$(realpath "$BUNDLE")"):ro")
fi

status=0
docker run "${args[@]}" "$IMAGE" "$@" || status=$?
exit "$status"
