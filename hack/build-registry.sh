#!/usr/bin/env bash
# Build the CNCF distribution registry (github.com/distribution/distribution/v3 cmd/registry)
# from its Go module into a version-keyed cache folder outside the checkout
# (hack/go-build-cached.sh). testing/registry.py runs it on loopback over TLS.
#
#   TETHER_REGISTRY_CACHE  cache root (default ~/.cache/tether/registry)
#
# Prints the registry binary's path on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=registry-version.env
source "$here/registry-version.env"
# shellcheck source=go-build-cached.sh
source "$here/go-build-cached.sh"

cache_root="${TETHER_REGISTRY_CACHE:-$HOME/.cache/tether/registry}"
go_build_cached registry "$cache_root" "$cache_root/registry-$REGISTRY_VERSION/bin/registry" \
  github.com/distribution/distribution/v3 "$REGISTRY_VERSION" \
  github.com/distribution/distribution/v3/cmd/registry \
  -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION"
