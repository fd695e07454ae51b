#!/usr/bin/env bash
# Build hack/lcm-api-check (a validator of the Kyma module's ModuleTemplate and
# ModuleReleaseMeta) against lifecycle-manager's published api module into a cache folder
# outside the checkout keyed by the pinned version and the source's hash
# (hack/go-build-cached.sh). tests/release/test_module.py runs it on what the release writes.
#
#   TETHER_LCM_API_CHECK_CACHE  cache root (default ~/.cache/tether/lcm-api-check)
#
# Prints the binary's path on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lcm-api-version.env
source "$here/lcm-api-version.env"
# shellcheck source=go-build-cached.sh
source "$here/go-build-cached.sh"

source_dir="$here/lcm-api-check"
hash="$(cat "$source_dir"/*.go | sha256sum | cut -c1-12)"
cache_root="${TETHER_LCM_API_CHECK_CACHE:-$HOME/.cache/tether/lcm-api-check}"
GBC_SOURCE="$source_dir" go_build_cached lcm-api-check "$cache_root" \
  "$cache_root/api-$LCM_API_VERSION-$hash/bin/lcm-api-check" \
  github.com/kyma-project/lifecycle-manager/api "$LCM_API_VERSION" . -ldflags "-s -w"
