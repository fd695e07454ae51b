#!/usr/bin/env bash
# Build the Prometheus server from its Go module into a version-keyed cache folder outside
# the checkout (tags remove_all_sd,enable_kubernetes_sd: Kubernetes service discovery only;
# no web UI assets, the HTTP API is all the test uses). A second run is a no-op.
#
#   TETHER_PROMETHEUS_CACHE  cache root (default ~/.cache/tether/prometheus)
#
# Prints the path of the binary on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=prometheus-version.env
source "$here/prometheus-version.env"
cache_root="${TETHER_PROMETHEUS_CACHE:-$HOME/.cache/tether/prometheus}"
out="$cache_root/$PROMETHEUS_MODULE_VERSION"
log() { printf '[build-prometheus] %s\n' "$*" >&2; }

if [[ -x "$out/prometheus" ]]; then
  log "cached: $out/prometheus (nothing to do)"
  echo "$out/prometheus"
  exit 0
fi
command -v go >/dev/null || { log "ERROR: the go command is missing; install Go >= 1.26"; exit 1; }
log "building github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION (a few minutes the first time)"
work="$(mktemp -d "${TMPDIR:-/tmp}/tether-prom-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init tether.local/prometheus >/dev/null 2>&1
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
GO
export GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0
go get "github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION" >/dev/null
mkdir -p "$out"
go build -tags remove_all_sd,enable_kubernetes_sd -o "$out/prometheus.new" \
  github.com/prometheus/prometheus/cmd/prometheus
mv "$out/prometheus.new" "$out/prometheus"
"$out/prometheus" --version | head -1 >&2
echo "$out/prometheus"
