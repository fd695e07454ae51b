#!/usr/bin/env bash
# Installs the image tools from Debian's packages when they are missing; a second run is a
# no-op. A fresh machine (CI) gets them from here: `make image-tools` (a prerequisite of
# `make test`), and hack/build-image.sh runs it first.
#   buildah      builds the Dockerfile without a Docker engine (no daemon)
#   podman       runs the image the way a Pod does (tests/foundation/test_image.py)
#   runc         the OCI runtime podman uses here: crun, Debian's default, refuses this
#                machine's hybrid cgroup v1/v2 layout (docs/development.md "The image")
#   debootstrap  builds the stand-in base image: no container registry is reachable from
#                these machines, so python:3.11-slim cannot be pulled
set -euo pipefail

need=()
for tool in buildah podman runc debootstrap; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
echo "installing ${need[*]} (Debian packages)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${need[@]}" >/dev/null
