#!/usr/bin/env bash
# Build cosign (github.com/sigstore/cosign/v2 cmd/cosign) from its Go module into a
# version-keyed cache folder outside the checkout (hack/go-build-cached.sh).
#
#   TETHER_COSIGN_CACHE  cache root (default ~/.cache/tether/cosign)
#
# Prints the cosign binary's path on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cosign-version.env
source "$here/cosign-version.env"
# shellcheck source=go-build-cached.sh
source "$here/go-build-cached.sh"

cache_root="${TETHER_COSIGN_CACHE:-$HOME/.cache/tether/cosign}"
go_build_cached cosign "$cache_root" "$cache_root/cosign-$COSIGN_VERSION/bin/cosign" \
  github.com/sigstore/cosign/v2 "$COSIGN_VERSION" github.com/sigstore/cosign/v2/cmd/cosign \
  -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION"
