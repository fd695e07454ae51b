#!/usr/bin/env bash
# Sourced by the hack/build-*.sh scripts that build one binary of a published Go module into
# a version-keyed cache folder outside the checkout (cosign, Prometheus, the OCI registry), as
# hack/build-controlplane.sh builds the control plane: a second run with the same pin is a
# no-op, one build at a time per cache root (flock), a missing cache is rebuilt.
#
#   go_build_cached LABEL CACHE_ROOT BINARY MODULE VERSION PACKAGE [go build flags...]
#
# builds PACKAGE of MODULE@VERSION in a throw-away module (CGO off, -mod=mod) into BINARY
# (written beside as BINARY.new, then moved) and prints BINARY's path on its last line.
# With GBC_SOURCE set to a folder of this checkout holding a Go main package, that package is
# built instead (PACKAGE "."), against MODULE@VERSION and what MODULE's go.mod requires
# (go mod tidy adds nothing newer); BINARY's path should then name a hash of the source.

go_build_cached() {
  local label="$1" cache_root="$2" binary="$3" module="$4" version="$5" package="$6"
  shift 6
  _gbc_log() { printf '[build-%s] %s\n' "$label" "$*" >&2; }
  if [[ -x "$binary" ]]; then
    _gbc_log "cached: $binary (nothing to do)"
    echo "$binary"
    return 0
  fi
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.build.lock"
  flock 9
  if [[ -x "$binary" ]]; then
    _gbc_log "cached: $binary (built while this one waited)"
    echo "$binary"
    return 0
  fi
  command -v go >/dev/null || { _gbc_log "ERROR: the go command is missing; install Go >= 1.26"; return 1; }
  _gbc_log "building ${GBC_SOURCE:-$package@$version} (a few minutes on 2 cores the first time)"
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/tether-$label-build.XXXXXX")"
  # shellcheck disable=SC2064 # expand now: the folder of this build
  trap "rm -rf '$work'" EXIT
  (
    export GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0
    cd "$work"
    go mod init "tether.local/$label" >/dev/null 2>&1
    if [[ -n "${GBC_SOURCE:-}" ]]; then
      cp "$GBC_SOURCE"/*.go .
    else
      printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$package" >tools.go
    fi
    _gbc_log "resolving $module@$version"
    go get "$module@$version" >"$work/get.log" 2>&1 || { cat "$work/get.log" >&2; _gbc_log "ERROR: go get $module@$version failed"; exit 1; }
    if [[ -n "${GBC_SOURCE:-}" ]]; then
      go mod tidy >>"$work/get.log" 2>&1 || { cat "$work/get.log" >&2; _gbc_log "ERROR: go mod tidy failed"; exit 1; }
    fi
    mkdir -p "$(dirname "$binary")"
    _gbc_log "compiling (go build)"
    go build -trimpath "$@" -o "$binary.new" "$package"
    mv "$binary.new" "$binary"
  ) || return 1
  _gbc_log "done: $binary"
  echo "$binary"
}
