#!/usr/bin/env bash
# Build the Prometheus server from its Go module into a version-keyed cache folder outside
# the checkout (hack/go-build-cached.sh; tags remove_all_sd,enable_kubernetes_sd: Kubernetes
# service discovery only; no web UI assets, the HTTP API is all the test uses).
#
#   TETHER_PROMETHEUS_CACHE  cache root (default ~/.cache/tether/prometheus)
#
# Prints the path of the binary on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=prometheus-version.env
source "$here/prometheus-version.env"
# shellcheck source=go-build-cached.sh
source "$here/go-build-cached.sh"

cache_root="${TETHER_PROMETHEUS_CACHE:-$HOME/.cache/tether/prometheus}"
go_build_cached prometheus "$cache_root" "$cache_root/$PROMETHEUS_MODULE_VERSION/prometheus" \
  github.com/prometheus/prometheus "$PROMETHEUS_MODULE_VERSION" \
  github.com/prometheus/prometheus/cmd/prometheus -tags remove_all_sd,enable_kubernetes_sd
