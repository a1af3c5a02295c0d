#!/bin/sh
# Build the egress proxy image's base from Debian packages alone: no image registry is needed, only a
# Debian mirror. One mmdebstrap run yields pd-egress-base:<hash> and :bookworm with
#   squid             the proxy (5.7), its only service
#   ca-certificates   squid's recommends: what it trusts when it fetches an https:// URL itself
# Error pages are kept in English alone (squid.conf's error_directory); the other 200 languages are 8 MB.
# Perl (45 MB, a third of the rootfs) is purged: squid depends on it only through libdbi-perl, for its
# database and rewrite helpers, none of which this proxy runs; an interpreter less is also less to use
# for anyone who gets into the container. The base is a leaf: nothing apt-installs on it afterwards.
# When the hash tag already exists the build is skipped.
#
# Usage: build-base.sh            (needs root for mmdebstrap, or a working unshare mode)
# Env:   PD_DEBIAN_MIRROR         (default http://deb.debian.org/debian)
set -eu

SUITE=bookworm
PACKAGES="squid,ca-certificates"
MIRROR="${PD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
REPO=pd-egress-base

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

# Docs, man pages, locales and apt's lists are dead weight in a proxy container; recommends would add
# libcap2-bin, which squid does not need.
mmdebstrap --variant=minbase --include="$PACKAGES" \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/share/squid-langpack/*' \
    --dpkgopt='path-include=/usr/share/squid-langpack/en/*' \
    --customize-hook='chroot "$1" dpkg --purge --force-depends libdbi-perl perl libperl5.36 \
        perl-modules-5.36 libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl >/dev/null' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
    "$SUITE" "$work/rootfs.tar" "$MIRROR"

docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/sh"]' \
    --message "pi-dispatch egress base: $SUITE minbase + $PACKAGES" \
    "$work/rootfs.tar" "$REPO:$hash" >/dev/null

docker tag "$REPO:$hash" "$REPO:$SUITE"
size=$(docker image inspect -f '{{.Size}}' "$REPO:$hash")
squid=$(docker run --rm "$REPO:$hash" squid -v | head -n 1)
echo "build-base: $REPO:$hash ($((size / 1000000)) MB), $squid, in $(( $(date +%s) - start ))s"
