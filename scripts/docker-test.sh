#!/usr/bin/env bash
# `make docker-test`: build the job image offline and check that the containerised job is
# reproducible and fails cleanly. Meant for CI (root, clean clone, ../shared beside the repo);
# works on a developer machine with Docker too. Prints the time of every step and the image size.
#
#  1. Docker engine: install docker.io/debootstrap if missing; start dockerd if not running
#     (overlay2, falling back to vfs; without iptables/bridge if those fail).
#  2. Base image (debootstrap, reused) unless BASE_IMAGE is set; `make wheelhouse`; `make image`.
#  3. Stand-in job twice in the container (--network none, fixtures read-only, key from
#     `python -m job keygen` on the host), each into its own /out; verify both on the host
#     with `python -m verify --trusted-key`; the same job once on the host.
#  4. data/predictions/*.parquet, data/temperature.json, data/trajectory.json and
#     data/metrics.json must be byte-identical across the three bundles.
#  5. Re-execution: a fresh reproducer key; `python -m job reproduce` of container bundle 1 in
#     the container (--network none, the bundle mounted read-only), full; the attestation must say
#     reproduced, and the verifier on the host must count it (assurance: reproduced by 1 party).
#     Then the same reproduction with oneDNN and ATen limited to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2
#     ATEN_CPU_CAPABILITY=avx2, like an AVX2-only machine): it must exit 0 with the verdict
#     bit-identical or equivalent.
#  6. Bad inputs in the container: no key volume, formal profile with an empty /cache and no
#     network, read-only output volume: each must exit non-zero with one `error: ...` sentence
#     on stderr and leave nothing in the output volume.
#
# Environment: IMAGE (default calibration-job:latest), BASE_IMAGE (default: local debootstrap
# base), FIXTURES (default ../shared/fixtures), PY (host python with the project's deps; default
# .venv/bin/python, created with `make install` if missing), KEEP=1 keeps the work directory.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

IMAGE=${IMAGE:-calibration-job:latest}
BASE_IMAGE=${BASE_IMAGE:-}
FIXTURES=${FIXTURES:-../shared/fixtures}
PY=${PY:-.venv/bin/python}
LOCK=job/locks/standin.json
T0=$(date +%s)
FAILS=()
declare -a TIMES=()

stamp() { date -u +%H:%M:%S; }
step() { STEP_NAME=$1; STEP_T0=$(date +%s); printf '\n=== [%s] %s\n' "$(stamp)" "$1"; }
done_step() {
  local dt=$(( $(date +%s) - STEP_T0 ))
  TIMES+=("$(printf '%5ss  %s' "$dt" "$STEP_NAME")")
  printf -- '--- [%s] %s: %ss\n' "$(stamp)" "$STEP_NAME" "$dt"
}
fail() { echo "FAIL: $*" >&2; FAILS+=("$*"); }
die() { echo "docker-test: $*" >&2; summary; exit 1; }
summary() {
  printf '\n=== summary (%ss in all)\n' "$(( $(date +%s) - T0 ))"
  printf '%s\n' "${TIMES[@]}"
  [[ -n "${IMAGE_SIZE:-}" ]] && echo "image $IMAGE ${IMAGE_ID:-}: $IMAGE_SIZE"
  if ((${#FAILS[@]})); then printf 'FAILED: %s\n' "${FAILS[@]}"; else echo "docker-test: all checks passed"; fi
}

# ---- 1. engine -----------------------------------------------------------------------------
step "docker engine"
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || [[ -n "$BASE_IMAGE" ]] || need+=(debootstrap)
if ((${#need[@]})); then
  echo "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need[@]}" >/tmp/docker-test-apt.log 2>&1 ||
    { apt-get update -q >>/tmp/docker-test-apt.log 2>&1 &&
      apt-get install -y -q "${need[@]}" >>/tmp/docker-test-apt.log 2>&1; } ||
    die "apt-get install ${need[*]} failed (see /tmp/docker-test-apt.log)"
fi

wait_docker() {  # $1 = seconds; succeeds once `docker info` answers
  local i
  for ((i = 0; i < $1; i++)); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  return 1
}
start_dockerd() {  # start dockerd with "$@"; succeeds if it answers within 30 s
  echo "starting: dockerd $* (log /tmp/dockerd.log)"
  (setsid dockerd "$@" >>/tmp/dockerd.log 2>&1 &)
  wait_docker 30 && return 0
  local pid; pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; sleep 3; fi
  rm -f /var/run/docker.pid
  return 1
}
if ! docker info >/dev/null 2>&1; then
  start_dockerd --storage-driver=overlay2 ||
  start_dockerd --storage-driver=overlay2 --iptables=false --bridge=none ||
  start_dockerd --storage-driver=vfs --iptables=false --bridge=none ||
    { tail -20 /tmp/dockerd.log >&2; die "cannot start dockerd (see /tmp/dockerd.log)"; }
fi
docker info --format 'dockerd {{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupVersion}}' ||
  die "docker info failed"
done_step

# ---- 2. images -----------------------------------------------------------------------------
if [[ -z "$BASE_IMAGE" ]]; then
  step "base image (debootstrap, reused when present)"
  BASE_IMAGE=calibration-base:bookworm
  BASE_TAG=$BASE_IMAGE bash scripts/base-image.sh || die "base image failed"
  done_step
fi

step "wheelhouse"
make --no-print-directory wheelhouse || die "make wheelhouse failed"
done_step

step "image build (docker build --network none)"
make --no-print-directory image IMAGE="$IMAGE" BASE_IMAGE="$BASE_IMAGE" || die "image build failed"
IMAGE_ID=$(docker image inspect -f '{{.Id}}' "$IMAGE")
IMAGE_SIZE=$(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB (%d bytes)", $1/1e6, $1}')
echo "image $IMAGE $IMAGE_ID: $IMAGE_SIZE"
done_step

step "image sanity (no network)"
docker run --rm --network none --entrypoint python "$IMAGE" -c '
import os, sys, torch, transformers
assert torch.__version__.endswith("+cpu"), torch.__version__
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "uid", os.getuid(), "OMP_NUM_THREADS", os.environ["OMP_NUM_THREADS"])' || fail "image sanity"
done_step

# ---- 3. runs -------------------------------------------------------------------------------
[[ -d "$FIXTURES" ]] || die "fixtures not found at $FIXTURES (set FIXTURES=...)"
if [[ ! -x "$PY" ]]; then
  step "host venv (make install)"
  make --no-print-directory install || die "make install failed"
  done_step
fi
WORK=$(mktemp -d /tmp/docker-test.XXXXXX)
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf -- "$WORK"' EXIT
echo "work directory: $WORK"

step "signing key (python -m job keygen on the host)"
"$PY" -m job keygen --out "$WORK/keys" || die "keygen failed"
ls -l "$WORK/keys"
done_step

EPOCH=$(docker image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" | sed -n 's/^SOURCE_DATE_EPOCH=//p')
JOB=(run --resources "/app/$LOCK" --out /out/bundle --signing-key /keys/signing-key.pem --no-progress)

for n in 1 2; do
  step "container run $n (--network none, fixtures read-only)"
  IMAGE=$IMAGE OUTDIR="$WORK/c$n" KEYDIR="$WORK/keys" FIXTURES="$FIXTURES" \
    bash scripts/docker-run.sh "${JOB[@]}" || fail "container run $n exited $?"
  done_step
  step "verify container bundle $n on the host"
  "$PY" -m verify "$WORK/c$n/bundle" --trusted-key "$WORK/keys/signing-key.pub.pem" --protocol provenance.json ||
    fail "verify of container bundle $n exited $?"
  done_step
done

step "host run (same job, .venv)"
env PYTHONHASHSEED=0 OMP_NUM_THREADS=4 MKL_NUM_THREADS=4 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    SOURCE_DATE_EPOCH="$EPOCH" \
  "$PY" -m job run --resources "$LOCK" --out "$WORK/host/bundle" \
    --signing-key "$WORK/keys/signing-key.pem" --no-progress || fail "host run exited $?"
"$PY" -m verify "$WORK/host/bundle" --trusted-key "$WORK/keys/signing-key.pub.pem" --protocol provenance.json ||
  fail "verify of host bundle exited $?"
done_step

# ---- 4. byte identity ----------------------------------------------------------------------
step "byte identity: container 1 vs container 2 vs host"
files=()
if [[ -d "$WORK/c1/bundle/data/predictions" ]]; then
  while IFS= read -r f; do files+=("$f"); done < <(cd "$WORK/c1/bundle" && ls data/predictions/*.parquet)
fi
((${#files[@]})) || fail "no data/predictions/*.parquet in container bundle 1"
# every payload file whose bytes the job decides (environment.json, report.md and the crate name the
# interpreter and the image, which differ by design)
files+=(data/temperature.json data/trajectory.json data/metrics.json data/bootstrap.json data/stability.json
        data/pools.json data/figures/reliability-audit.png data/figures/confidence-audit.png)
for f in "${files[@]}"; do
  sums=()
  for b in c1 c2 host; do
    if [[ -f "$WORK/$b/bundle/$f" ]]; then sums+=("$(sha256sum < "$WORK/$b/bundle/$f" | cut -c1-16)"); else sums+=(missing); fi
  done
  if [[ "${sums[0]}" != missing && "${sums[0]}" == "${sums[1]}" && "${sums[0]}" == "${sums[2]}" ]]; then
    printf 'identical  %-40s %s\n' "$f" "${sums[0]}"
  else
    printf 'DIFFERENT  %-40s c1=%s c2=%s host=%s\n' "$f" "${sums[@]}"
    fail "$f differs between bundles"
  fi
done
done_step

# ---- 5. re-execution -----------------------------------------------------------------------
step "reproduce container bundle 1 in the container (--network none, bundle read-only)"
"$PY" -m job keygen --out "$WORK/reproducer" || die "keygen (reproducer) failed"
IMAGE=$IMAGE OUTDIR="$WORK/r" KEYDIR="$WORK/reproducer" FIXTURES="$FIXTURES" BUNDLE="$WORK/c1/bundle" \
  bash scripts/docker-run.sh reproduce /bundle/bundle --out /out/reproduction.intoto.json \
    --signing-key /keys/signing-key.pem --resources "/app/$LOCK" --no-progress ||
  fail "container reproduction exited $?"
done_step
step "verify container bundle 1 with its reproduction attestation on the host"
"$PY" -m verify "$WORK/c1/bundle" --trusted-key "$WORK/keys/signing-key.pub.pem" --protocol provenance.json \
    --reproduction "$WORK/r/reproduction.intoto.json" \
    --trusted-reproducer "$WORK/reproducer/signing-key.pub.pem" >"$WORK/r.verify.txt" ||
  fail "verify with the reproduction attestation exited $?"
tail -n 5 "$WORK/r.verify.txt"
grep -q "logits reproduced bit for bit by 1 trusted party (full: 616 rows)" "$WORK/r.verify.txt" ||
  fail "the verifier does not report the full reproduction"
done_step

step "reproduce container bundle 1 with oneDNN and ATen limited to AVX2"
ISA_RC=0
ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \
IMAGE=$IMAGE OUTDIR="$WORK/r-avx2" KEYDIR="$WORK/reproducer" FIXTURES="$FIXTURES" BUNDLE="$WORK/c1/bundle" \
  bash scripts/docker-run.sh reproduce /bundle/bundle --out /out/reproduction.intoto.json \
    --signing-key /keys/signing-key.pem --resources "/app/$LOCK" --no-progress || ISA_RC=$?
((ISA_RC == 0)) || fail "the reproduction limited to AVX2 exited $ISA_RC"
VERDICT=$("$PY" -c 'import base64, json, sys
envelope = json.load(open(sys.argv[1], encoding="utf-8"))
print(json.loads(base64.b64decode(envelope["payload"]))["predicate"]["verdict"])' \
  "$WORK/r-avx2/reproduction.intoto.json" 2>/dev/null) || VERDICT=unreadable
echo "verdict under AVX2: $VERDICT"
[[ $VERDICT == bit-identical || $VERDICT == equivalent ]] ||
  fail "the reproduction limited to AVX2 says $VERDICT, expected bit-identical or equivalent"
done_step

# ---- 6. bad inputs -------------------------------------------------------------------------
# Each case: exit non-zero, one `error: <sentence>` line last on stderr, no traceback, no bundle.
bad_case() {  # name, then env assignments for docker-run.sh, then -- and the job arguments
  local name=$1; shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  step "bad input: $name"
  local out="$WORK/bad-$RANDOM"
  mkdir -p "$out"
  local rc=0
  env IMAGE="$IMAGE" OUTDIR="$out" "${envs[@]}" bash scripts/docker-run.sh "$@" \
    >"$out.stdout" 2>"$out.stderr" || rc=$?
  local errors; errors=$(grep -c '^error: ' "$out.stderr" || true)
  echo "exit $rc; stderr:"; sed 's/^/  | /' "$out.stderr"
  ((rc != 0)) || fail "$name: exit status 0"
  # The stand-in lock adds a "note: ... profile 'other'" block; the error itself is one line.
  ((errors == 1)) || fail "$name: expected one 'error: ...' line on stderr, got $errors"
  [[ "$(grep . "$out.stderr" | tail -n1)" == error:* ]] || fail "$name: last stderr line is not the error"
  if grep -q Traceback "$out.stderr" "$out.stdout"; then fail "$name: traceback"; fi
  if [[ -n "$(ls -A "$out" 2>/dev/null)" ]]; then
    fail "$name: left files in the output volume: $(ls -A "$out" | tr '\n' ' ')"
  fi
  done_step
}
bad_case "no key volume (/keys empty)" FIXTURES="$FIXTURES" -- "${JOB[@]}"
mkdir -p "$WORK/empty-cache"
[[ $(id -u) != 0 ]] || chown 10001:10001 "$WORK/empty-cache"  # empty, but writable like a real cache
bad_case "formal profile, empty /cache, no network" CACHE="$WORK/empty-cache" KEYDIR="$WORK/keys" -- \
  run --out /out/bundle --signing-key /keys/signing-key.pem --no-progress
bad_case "read-only output volume" OUT_RO=1 FIXTURES="$FIXTURES" KEYDIR="$WORK/keys" -- "${JOB[@]}"

summary
((${#FAILS[@]} == 0))
