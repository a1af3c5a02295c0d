#!/bin/sh
# Build the job image's bases from Debian packages alone: no image registry is needed, only a Debian
# mirror. One mmdebstrap run yields two images:
#   pd-job-base:<hash> and :trixie     nodejs, npm, git, ca-certificates (the Dockerfile's build stage)
#   pd-job-runtime:<hash> and :trixie  the same rootfs with npm purged (the final stage)
# Debian's npm drags in node-gyp, python3, libssl-dev, webpack, babel...: about half of the rootfs, none
# of it needed once pi is installed. When both hash tags already exist the whole build is skipped.
#
# Usage: build-base.sh            (needs root for mmdebstrap, or a working unshare mode)
# Env:   PD_DEBIAN_MIRROR         (default http://deb.debian.org/debian)
set -eu

SUITE=trixie
PACKAGES="nodejs,npm,git,ca-certificates"
MIRROR="${PD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
REPO=pd-job-base
RUNTIME=pd-job-runtime
# Node's minimum for the pinned pi (package.json "engines").
NODE_MIN_MAJOR=20
NODE_MIN_MINOR=6

here=$(cd "$(dirname "$0")" && pwd)
# The hash covers what decides the rootfs: packages, suite and this script (its options). The mirror is
# left out on purpose: another mirror of the same suite yields the same packages.
hash=$( { printf '%s\n%s\n' "$PACKAGES" "$SUITE"; cat "$here/build-base.sh"; } | sha256sum | cut -c1-16)

if docker image inspect "$REPO:$hash" "$RUNTIME:$hash" >/dev/null 2>&1; then
    docker tag "$REPO:$hash" "$REPO:$SUITE"
    docker tag "$RUNTIME:$hash" "$RUNTIME:$SUITE"
    echo "build-base: $REPO:$hash and $RUNTIME:$hash exist; skipped"
    exit 0
fi

if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "build-base: installing mmdebstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
start=$(date +%s)

# Docs, man pages, locales and apt's lists are dead weight in a job container; recommends would pull in
# build toolchains through npm.
mmdebstrap --variant=minbase --include="$PACKAGES" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
    --customize-hook="tar -C \"\$1\" --numeric-owner --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* -cf $work/base.tar ." \
    --customize-hook='chroot "$1" apt-get purge -y -qq --autoremove npm >/dev/null' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/log/*' \
    "$SUITE" "$work/runtime.tar" "$MIRROR"

import_rootfs() {  # tar, tag, what
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        --message "pi-dispatch job $3: $SUITE minbase + $PACKAGES" \
        "$1" "$2" >/dev/null
}
import_rootfs "$work/base.tar" "$REPO:$hash" base
import_rootfs "$work/runtime.tar" "$RUNTIME:$hash" "runtime (npm purged)"

# Fail here rather than at `npm install -g` time with an engines warning nobody reads.
node_version=$(docker run --rm "$RUNTIME:$hash" node --version)
major=$(echo "$node_version" | sed 's/^v\([0-9]*\)\..*/\1/')
minor=$(echo "$node_version" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')
if [ "$major" -lt "$NODE_MIN_MAJOR" ] || { [ "$major" -eq "$NODE_MIN_MAJOR" ] && [ "$minor" -lt "$NODE_MIN_MINOR" ]; }; then
    docker rmi "$REPO:$hash" "$RUNTIME:$hash" >/dev/null
    echo "build-base: $SUITE ships node $node_version; pi needs >= $NODE_MIN_MAJOR.$NODE_MIN_MINOR" >&2
    exit 1
fi

docker tag "$REPO:$hash" "$REPO:$SUITE"
docker tag "$RUNTIME:$hash" "$RUNTIME:$SUITE"
size=$(docker image inspect -f '{{.Size}}' "$REPO:$hash")
rsize=$(docker image inspect -f '{{.Size}}' "$RUNTIME:$hash")
echo "build-base: $REPO:$hash ($((size / 1000000)) MB), $RUNTIME:$hash ($((rsize / 1000000)) MB), node $node_version, in $(( $(date +%s) - start ))s"
