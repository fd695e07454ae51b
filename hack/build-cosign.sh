#!/usr/bin/env bash
# Build cosign (github.com/sigstore/cosign/v2 cmd/cosign) from its Go module into a
# version-keyed cache folder outside the checkout, as hack/build-controlplane.sh builds the
# control plane: a second run with the same pin is a no-op; one build at a time.
#
#   TETHER_COSIGN_CACHE  cache root (default ~/.cache/tether/cosign)
#
# Prints the cosign binary's path on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cosign-version.env
source "$here/cosign-version.env"

cache_root="${TETHER_COSIGN_CACHE:-$HOME/.cache/tether/cosign}"
out="$cache_root/cosign-${COSIGN_VERSION}"

log() { printf '[build-cosign] %s\n' "$*" >&2; }

if [[ -x "$out/bin/cosign" ]]; then
  log "cached: $out (nothing to do)"
  echo "$out/bin/cosign"
  exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if [[ -x "$out/bin/cosign" ]]; then
  log "cached: $out (built while this one waited)"
  echo "$out/bin/cosign"
  exit 0
fi

command -v go >/dev/null || { log "ERROR: the go command is missing; install Go >= 1.26"; exit 1; }
log "building cosign $COSIGN_VERSION (several minutes on 2 cores the first time)"
work="$(mktemp -d "${TMPDIR:-/tmp}/tether-cosign-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0
cd "$work"
go mod init tether.local/cosign >/dev/null 2>&1
cat > tools.go <<GO
//go:build tools

package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
GO
go mod edit -require="github.com/sigstore/cosign/v2@$COSIGN_VERSION"
log "resolving cosign modules"
go mod tidy >"$work/tidy.log" 2>&1 || { cat "$work/tidy.log" >&2; log "ERROR: go mod tidy (cosign) failed"; exit 1; }
log "compiling cosign (go build)"
mkdir -p "$out/bin.new"
go build -trimpath -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
  -o "$out/bin.new/cosign" github.com/sigstore/cosign/v2/cmd/cosign
rm -rf "$out/bin" && mv "$out/bin.new" "$out/bin"
log "done: $("$out/bin/cosign" version 2>/dev/null | grep -i gitversion || echo "$COSIGN_VERSION")"
echo "$out/bin/cosign"
