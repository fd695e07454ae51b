#!/usr/bin/env bash
# Build kube-apiserver, kubectl, kube-controller-manager and etcd (and etcd's snapshot
# tools etcdctl and etcdutl) from Go modules into a version-keyed cache folder outside the
# checkout. A second run with the same pins is a no-op; a cache folder that lacks some
# binaries (e.g. one made before the snapshot tools or the controller manager were added)
# gets only the missing groups built.
#
#   TETHER_CONTROLPLANE_CACHE  cache root (default ~/.cache/tether/controlplane)
#
# Prints the folder holding the binaries on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=controlplane-versions.env
source "$here/controlplane-versions.env"

cache_root="${TETHER_CONTROLPLANE_CACHE:-$HOME/.cache/tether/controlplane}"
out="$cache_root/kubernetes-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}"
bins=(kube-apiserver kubectl kube-controller-manager etcd etcdctl etcdutl)

log() { printf '[build-controlplane] %s\n' "$*" >&2; }
missing() { for b in "$@"; do [[ -x "$out/bin/$b" ]] || return 0; done; return 1; }

if ! missing "${bins[@]}" && [[ -f "$out/VERSIONS" ]]; then
  log "cached: $out (nothing to do)"
  echo "$out/bin"
  exit 0
fi

# one build at a time (parallel test workers, a demo beside the tests): wait for the one
# under way, then take what it built
mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if ! missing "${bins[@]}" && [[ -f "$out/VERSIONS" ]]; then
  log "cached: $out (built while this one waited)"
  echo "$out/bin"
  exit 0
fi

command -v go >/dev/null || { log "ERROR: the go command is missing; install Go >= 1.26"; exit 1; }
log "building what $out lacks (kube-apiserver, kubectl, kube-controller-manager $KUBERNETES_VERSION; etcd $ETCD_VERSION and its snapshot tools)"
log "first build takes several minutes on 2 cores; later runs reuse the cache"

work="$(mktemp -d "${TMPDIR:-/tmp}/tether-cp-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out/bin"
export GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0

# --- the k8s.io/kubernetes wrapper module (made once, for whichever group below needs it) ---
# k8s.io/kubernetes replaces every staging module k8s.io/X with ./staging/src/k8s.io/X,
# which does not exist for a consumer. Read that list from the module's own go.mod and
# replace each with the published k8s.io/X v0.N.M instead.
minor="${KUBERNETES_VERSION#v1.}"          # 37.2
k8s_ready=""
k8s_module() {
  [[ -z "$k8s_ready" ]] || { cd "$work/k8s"; return 0; }
  local staging_version="v0.${minor}" modfile n=0 mod pkg
  mkdir -p "$work/k8s"
  cd "$work/k8s"
  go mod init tether.local/controlplane >/dev/null 2>&1
  log "downloading k8s.io/kubernetes@$KUBERNETES_VERSION module metadata"
  modfile="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  [[ -f "$modfile" ]] || { log "ERROR: could not download k8s.io/kubernetes@$KUBERNETES_VERSION"; exit 1; }
  go mod edit -require="k8s.io/kubernetes@$KUBERNETES_VERSION"
  while read -r mod; do
    go mod edit -replace="$mod=$mod@$staging_version"
    n=$((n + 1))
  done < <(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$modfile")
  log "replaced $n staging modules with $staging_version"
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "resolving modules (go mod tidy)"
  go mod tidy >"$work/tidy.log" 2>&1 || { cat "$work/tidy.log" >&2; log "ERROR: go mod tidy failed"; exit 1; }
  k8s_ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*}"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  k8s_ready=1
}
k8s_build() {
  k8s_module
  local b
  for b in "$@"; do
    log "compiling $b (go build)"
    go build -trimpath -ldflags "$k8s_ldflags" -o "$out/bin/$b" "k8s.io/kubernetes/cmd/$b"
  done
}

# --- kube-apiserver and kubectl ------------------------------------------------------
if missing kube-apiserver kubectl; then
  k8s_build kube-apiserver kubectl
fi

# --- kube-controller-manager (its clusterrole-aggregation controller, for the tests of the
# aggregated tether-view/tether-edit roles; the planes themselves run without it) ------------
if missing kube-controller-manager; then
  k8s_build kube-controller-manager
fi

# --- etcd ------------------------------------------------------------------------------
if missing etcd; then
mkdir -p "$work/etcd"
cd "$work/etcd"
go mod init tether.local/etcd >/dev/null 2>&1
cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
log "resolving etcd modules"
go mod tidy >"$work/tidy-etcd.log" 2>&1 || { cat "$work/tidy-etcd.log" >&2; log "ERROR: go mod tidy (etcd) failed"; exit 1; }
log "compiling etcd (go build)"
go build -trimpath -ldflags "-s -w" -o "$out/bin/etcd" .
fi

# --- etcdctl (snapshot save) and etcdutl (snapshot restore) -------------------------------
# Each is its own module of the etcd repository at the same tag; built from the module's
# main package like any tool (the tests snapshot and restore a plane's etcd with them).
for tool in etcdctl etcdutl; do
  missing "$tool" || continue
  mkdir -p "$work/$tool"
  cd "$work/$tool"
  go mod init "tether.local/$tool" >/dev/null 2>&1
  cat > tools.go <<GO
//go:build tools

package tools

import _ "go.etcd.io/etcd/$tool/v3"
GO
  go mod edit -require="go.etcd.io/etcd/$tool/v3@$ETCD_VERSION"
  log "resolving $tool modules"
  go mod tidy >"$work/tidy-$tool.log" 2>&1 || { cat "$work/tidy-$tool.log" >&2; log "ERROR: go mod tidy ($tool) failed"; exit 1; }
  log "compiling $tool (go build)"
  go build -trimpath -ldflags "-s -w" -o "$out/bin/$tool" "go.etcd.io/etcd/$tool/v3"
done

printf 'KUBERNETES_VERSION=%s\nETCD_VERSION=%s\n' "$KUBERNETES_VERSION" "$ETCD_VERSION" > "$out/VERSIONS"
log "done: $("$out/bin/kube-apiserver" --version), etcd $ETCD_VERSION"
echo "$out/bin"
