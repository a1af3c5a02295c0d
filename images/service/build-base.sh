#!/bin/sh
# Build the service image's base from Debian packages alone: no image registry is needed, only a Debian
# mirror. One mmdebstrap run yields pd-service-base:<hash> and :bookworm with
#   python3, python3-venv   the services (bookworm's 3.11: the version the project is tested on)
#   git, ca-certificates    the worker fetches each forge job's tip commit and reads local folders
#   redis-server            compose's redis service (redis-cli also serves the operator's inspection)
#   haproxy                 compose's front, which spreads deliveries over the receivers
#   curl                    the healthchecks
# When the hash tag already exists the build is skipped.
#
# Usage: build-base.sh            (needs root for mmdebstrap, or a working unshare mode)
# Env:   PD_DEBIAN_MIRROR         (default http://deb.debian.org/debian)
set -eu

SUITE=bookworm
PACKAGES="python3,python3-venv,git,ca-certificates,redis-server,haproxy,curl"
MIRROR="${PD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
REPO=pd-service-base

here=$(cd "$(dirname "$0")" && pwd)
# The hash covers what decides the rootfs: packages, suite and this script (its options). The mirror is
# left out on purpose: another mirror of the same suite yields the same packages.
hash=$( { printf '%s\n%s\n' "$PACKAGES" "$SUITE"; cat "$here/build-base.sh"; } | sha256sum | cut -c1-16)

if docker image inspect "$REPO:$hash" >/dev/null 2>&1; then
    docker tag "$REPO:$hash" "$REPO:$SUITE"
    echo "build-base: $REPO:$hash exists; skipped"
    exit 0
fi

if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "build-base: installing mmdebstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
start=$(date +%s)

# Docs, man pages, locales and apt's lists are dead weight in a service container; recommends would pull
# in a compiler toolchain through python3-venv's pip.
mmdebstrap --variant=minbase --include="$PACKAGES" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
    "$SUITE" "$work/rootfs.tar" "$MIRROR"

docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "pi-dispatch service base: $SUITE minbase + $PACKAGES" \
    "$work/rootfs.tar" "$REPO:$hash" >/dev/null

docker tag "$REPO:$hash" "$REPO:$SUITE"
size=$(docker image inspect -f '{{.Size}}' "$REPO:$hash")
python=$(docker run --rm "$REPO:$hash" python3 --version)
echo "build-base: $REPO:$hash ($((size / 1000000)) MB), $python, in $(( $(date +%s) - start ))s"
