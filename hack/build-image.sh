#!/usr/bin/env bash
# Builds the product image tether:<version> (version: setup.cfg's [metadata] version) from
# the Dockerfile with buildah: no Docker engine, no daemon. `make image` runs it; so does
# tests/foundation/test_image.py (once per test session).
#
# The base image: the Dockerfile's BASE_IMAGE (python:3.11-slim). It is used when it is in
# buildah's storage already or can be pulled. These machines reach no container registry,
# so the pull fails at once; the script then builds a stand-in base from Debian's packages
# (debootstrap bookworm + python3.11, the Debian release and Python that python:3.11-slim
# is built on) as localhost/tether-base and builds on that, saying so loudly.
# docs/development.md "The image" has the evidence and what this does and does not check.
#
# Environment:
#   TETHER_BASE_IMAGE     build on this base, no pull attempt (e.g. localhost/tether-base)
#   TETHER_DEBIAN_MIRROR  where debootstrap gets the stand-in's packages (default: the
#                         first Debian archive in this machine's apt sources)
#   TETHER_IMAGE_REPORT   write key=value lines here: image, base, base_digest,
#                         base_pull_error, seconds
#   TETHER_BUILDAH_ISOLATION  buildah's --isolation for RUN steps (default: chroot)
#   TETHER_IMAGE_TAG      the image name (default: tether:<version>)
# pip inside the build reaches PyPI the way pip does on this machine (see below).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)

bash hack/install-image-tools.sh

version=$(sed -n 's/^version *= *//p' setup.cfg | head -1)
[ -n "$version" ] || { echo "build-image.sh: no version in setup.cfg" >&2; exit 1; }
tag=${TETHER_IMAGE_TAG:-tether:$version}
isolation=${TETHER_BUILDAH_ISOLATION:-chroot}
default_base=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile | head -1)
standin=localhost/tether-base:bookworm-python3.11

apt_mirror() {  # the first (non-security) archive this machine's apt reads, deb822 or one-line
  { sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
    sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null
  } | tr ' ' '\n' | grep -v -e '-security' -e '^$' | head -1
}

# buildah's storage driver: overlay where the kernel offers it (it does here), else vfs
if [ -z "${STORAGE_DRIVER:-}" ] && ! grep -qw overlay /proc/filesystems; then
  export STORAGE_DRIVER=vfs
fi

loud() { printf '\n*** %s\n\n' "$*" >&2; }

build_standin() {
  # a minimal Debian bookworm with python3.11 (+ venv/pip for the build stage) and CA
  # certificates; built once per machine, reused from buildah's storage afterwards
  if buildah inspect --type image "$standin" >/dev/null 2>&1; then return; fi
  local mirror=${TETHER_DEBIAN_MIRROR:-$(apt_mirror)}
  [ -n "$mirror" ] || { echo "build-image.sh: no Debian archive in apt's sources;" \
    "set TETHER_DEBIAN_MIRROR" >&2; exit 1; }
  echo "building the stand-in base $standin with debootstrap from $mirror"
  local ctr mnt
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  # --force-check-gpg: the archive's Release file must carry a valid Debian signature (the
  # packages' hashes are in it), never an unchecked download
  debootstrap --force-check-gpg --variant=minbase --include=python3.11,python3-venv,ca-certificates \
    bookworm "$mnt" "$mirror" >/tmp/tether-debootstrap.log 2>&1 \
    || { tail -20 /tmp/tether-debootstrap.log >&2; buildah rm "$ctr" >/dev/null; exit 1; }
  rm -rf "$mnt"/var/cache/apt/archives/*.deb "$mnt"/var/lib/apt/lists/* "$mnt"/var/log/*.log
  buildah umount "$ctr" >/dev/null
  buildah config --env LANG=C.UTF-8 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd python3 \
    --label org.opencontainers.image.description="Tether's stand-in for $default_base: Debian bookworm and its python3.11 (hack/build-image.sh)" \
    "$ctr"
  buildah commit --rm -q "$ctr" "$standin" >/dev/null
}

pull_error=""
if [ -n "${TETHER_BASE_IMAGE:-}" ]; then
  base=$TETHER_BASE_IMAGE
  [ "$base" = "$standin" ] && build_standin
elif buildah inspect --type image "$default_base" >/dev/null 2>&1; then
  base=$default_base
elif pull_error=$(timeout 120 buildah pull -q "$default_base" 2>&1 >/dev/null); then
  base=$default_base
else
  pull_error=$(printf '%s' "$pull_error" | tr '\n' ' ')
  loud "cannot pull the base image $default_base here: $pull_error
*** building on the stand-in base $standin instead (Debian bookworm + python3.11)"
  build_standin
  base=$standin
fi

# The base by digest: whatever names the base (a tag, the stand-in's name), the build uses
# the digest of the image in buildah's storage, and the image's labels and the report name
# it (org.opencontainers.image.base.*). A tag resolved here is said loudly: pin the digest in
# the Dockerfile's ARG BASE_IMAGE (name@sha256:...) so the next build cannot move.
base_digest=${base##*@}
[ "$base_digest" != "$base" ] || base_digest=$(buildah inspect --type image \
  --format '{{.FromImageDigest}}' "$base" 2>/dev/null || true)
from=$base
if [ -n "$base_digest" ] && [[ "$base" != *@* ]]; then
  from="$base@$base_digest"
  [ "$base" = "$standin" ] || loud "the base $base is named by tag; this build uses $from. Pin it in the Dockerfile: ARG BASE_IMAGE=$from"
fi

# How pip reaches PyPI here, for the build stage only: the settings pip uses on this machine
# (PIP_* variables first, then pip's configuration) go into a pip.conf that is bind-mounted
# into the RUN steps with the CA file it names; the image gets neither (the only build
# argument is the file's path).
pip_value() {
  local key=$1 var
  var=PIP_$(printf '%s' "$key" | tr 'a-z-' 'A-Z_')
  if [ -n "${!var:-}" ]; then printf '%s' "${!var}"; return; fi
  python3 -m pip config get "global.$key" 2>/dev/null || true
}
pipdir=$(mktemp -d)
trap 'rm -rf "$pipdir"' EXIT
mounts=(-v "$pipdir:/run/tether-build:ro")
echo "[global]" >"$pipdir/pip.conf"
for key in index-url extra-index-url trusted-host; do
  value=$(pip_value "$key")
  [ -z "$value" ] || echo "$key = $value" >>"$pipdir/pip.conf"
done
cert=$(pip_value cert)
if [ -n "$cert" ] && [ -f "$cert" ]; then
  cp "$cert" "$pipdir/ca.crt"
  echo "cert = /run/tether-build/ca.crt" >>"$pipdir/pip.conf"
fi
build_args=(--build-arg "BASE_IMAGE=$from" --build-arg PIP_CONFIG_FILE=/run/tether-build/pip.conf
            --label "org.opencontainers.image.base.name=$base"
            --label "org.opencontainers.image.base.digest=$base_digest")

previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$tag" 2>/dev/null || true)
driver=$(buildah info --format '{{.store.GraphDriverName}}' 2>/dev/null || echo '?')
echo "building $tag on $from ($(buildah --version), storage $driver, isolation $isolation)"
buildah bud --layers --isolation "$isolation" --network host \
  "${build_args[@]}" "${mounts[@]}" -t "$tag" -f Dockerfile .
# the image the tag named before is no layer cache of anything: removed, so rebuilds after
# code changes do not pile up copies of the virtualenv layer
current=$(buildah inspect --type image --format '{{.FromImageID}}' "$tag")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  buildah rmi "$previous" >/dev/null 2>&1 || true
fi
seconds=$(( $(date +%s) - start ))
echo "built $tag in ${seconds}s"

if [ -n "${TETHER_IMAGE_REPORT:-}" ]; then
  {
    echo "image=$tag"
    echo "base=$base"
    echo "base_digest=$base_digest"
    echo "default_base=$default_base"
    echo "base_pull_error=$pull_error"
    echo "isolation=$isolation"
    echo "seconds=$seconds"
  } >"$TETHER_IMAGE_REPORT"
fi
