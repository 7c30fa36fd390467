#!/usr/bin/env bash
# Build the Debian bookworm base image `calibration-base:bookworm` without a
# Docker registry: debootstrap a minbase rootfs (python3, python3-venv,
# ca-certificates) from the Debian mirror this machine uses and `docker import`
# it. Used when the official python:3.11-slim-bookworm image cannot be pulled.
#
#   scripts/base-image.sh            # reuse the image if it exists, else build it
#   FORCE=1 scripts/base-image.sh    # rebuild the image (the rootfs tarball is reused)
#   FORCE=2 scripts/base-image.sh    # also re-run debootstrap
#
# Environment: BASE_TAG (default calibration-base:bookworm), DEBIAN_MIRROR
# (default: first Debian URI in /etc/apt/sources.list*, else deb.debian.org),
# BASE_CACHE (default /var/cache/calibration-base; outside the repository),
# SOURCE_DATE_EPOCH (mtime clamp for the tarball; default 1700000000).
# Prints the image id on the last line of stdout. Needs root (debootstrap).
set -euo pipefail

TAG=${BASE_TAG:-calibration-base:bookworm}
SUITE=bookworm
CACHE=${BASE_CACHE:-/var/cache/calibration-base}
FORCE=${FORCE:-0}
EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
INCLUDE=python3,python3-venv,ca-certificates

log() { printf '[base-image %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

if [[ "$FORCE" == 0 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  log "reusing $TAG"
  docker image inspect -f '{{.Id}}' "$TAG"
  exit 0
fi

detect_mirror() {
  local f uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -r "$f" ]] || continue
    # one-line style: "deb [opts] URI suite ..." ; deb822 style: "URIs: URI"
    uri=$(sed -nE -e 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([a-z]+:\/\/[^[:space:]]+)[[:space:]]+(bookworm|stable)([[:space:]].*)?$/\2/p' \
                  -e 's/^URIs:[[:space:]]+([a-z]+:\/\/[^[:space:]]*\/debian\/?)$/\1/p' "$f" | grep -v -e security -e nodesource -e google | head -n1)
    if [[ -n "$uri" ]]; then echo "${uri%/}"; return; fi
  done
  echo http://deb.debian.org/debian
}
MIRROR=${DEBIAN_MIRROR:-$(detect_mirror)}

command -v debootstrap >/dev/null || {
  log "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2 ||
    { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2; }
}

mkdir -p "$CACHE/debs"
TARBALL="$CACHE/rootfs-$SUITE-minbase.tar"
if [[ "$FORCE" == 2 || ! -s "$TARBALL" ]]; then
  ROOTFS="$CACHE/rootfs.tmp"
  rm -rf "$ROOTFS"
  log "debootstrap --variant=minbase --include=$INCLUDE $SUITE from $MIRROR (debs cached in $CACHE/debs)"
  debootstrap --variant=minbase --include="$INCLUDE" --cache-dir="$CACHE/debs" \
    "$SUITE" "$ROOTFS" "$MIRROR" >&2
  # Trim what a container does not need and what would make the tarball vary.
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
         "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/log/* "$ROOTFS"/tmp/* \
         "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
         "$ROOTFS"/usr/share/locale/* "$ROOTFS"/etc/machine-id "$ROOTFS"/etc/hostname \
         "$ROOTFS"/etc/resolv.conf
  find "$ROOTFS" -name __pycache__ -type d -prune -exec rm -rf {} +
  : > "$ROOTFS/etc/machine-id"
  echo "deb $MIRROR $SUITE main" > "$ROOTFS/etc/apt/sources.list"
  # Deterministic archive: sorted names, clamped mtimes, numeric owners.
  tar -C "$ROOTFS" --sort=name --mtime="@$EPOCH" --clamp-mtime --numeric-owner \
      --xattrs --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
  rm -rf "$ROOTFS"
  log "rootfs tarball $(du -h "$TARBALL" | cut -f1) sha256=$(sha256sum "$TARBALL" | cut -c1-16)…"
else
  log "reusing rootfs tarball $TARBALL"
fi

log "docker import -> $TAG"
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --message "debootstrap $SUITE minbase +$INCLUDE from $MIRROR" \
  - "$TAG" < "$TARBALL" >&2
docker image inspect -f '{{.Id}}' "$TAG"
