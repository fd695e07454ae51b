#!/usr/bin/env bash
# Build cert-manager's controller and cainjector from the Go module
# github.com/cert-manager/cert-manager into a version-keyed cache folder outside the
# checkout, and copy the module's CRDs (deploy/crds/) beside them. A second run with the
# same pin is a no-op.
#
# Why not `go build github.com/cert-manager/cert-manager/cmd/controller`: upstream's cmd/
# folders are modules of their own (controller-binary, cainjector-binary) that require the
# main module at v0.0.0 with `replace => ../../`; they are not published, so the module
# proxy has none of them (404 for every version). Their packages are thin: options and a
# Run() that wires the real controllers, which all live in the main module (pkg/controller,
# pkg/issuer, internal/...). This script compiles a small main for each binary, written
# below, that wires those same packages the way upstream's Run() does: the controller
# builds cert-manager's controller ContextFactory from its own defaulted configuration and
# runs every enabled controller of controller.Known() (the upstream default set); the
# cainjector starts a controller-runtime manager and cainjector.RegisterAllInjectors. What
# is left out: leader election (one process), the metrics, healthz and pprof servers, the
# configuration file. The build module's path lies under github.com/cert-manager/cert-manager
# so that Go allows the imports of the module's internal/ packages (as upstream's do).
#
#   TETHER_CERT_MANAGER_CACHE  cache root (default ~/.cache/tether/cert-manager)
#
# Prints the folder holding bin/ and crds/ on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cert-manager-versions.env
source "$here/cert-manager-versions.env"

cache_root="${TETHER_CERT_MANAGER_CACHE:-$HOME/.cache/tether/cert-manager}"
out="$cache_root/$CERT_MANAGER_VERSION"
log() { printf '[build-cert-manager] %s\n' "$*" >&2; }

if [[ -x "$out/bin/controller" && -x "$out/bin/cainjector" && -f "$out/crds/cert-manager.io_certificates.yaml" ]]; then
  log "cached: $out (nothing to do)"
  echo "$out"
  exit 0
fi

command -v go >/dev/null || { log "ERROR: the go command is missing; install Go >= 1.26"; exit 1; }
log "building cert-manager $CERT_MANAGER_VERSION controller and cainjector (several minutes on 2 cores the first time)"
work="$(mktemp -d "${TMPDIR:-/tmp}/tether-cm-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0
go mod init github.com/cert-manager/cert-manager/tether-build >/dev/null 2>&1
mkdir -p controller cainjector

cat > controller/main.go <<'GO'
// The cert-manager controller: upstream's controllers for Certificates, CertificateRequests
// and the CA and self-signed issuers (registered by the imports below), wired as
// cmd/controller/app.Run does, without leader election and the metrics/healthz servers.
package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/cert-manager/cert-manager/internal/cmd/util"
	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	// every controller package registers itself with controller.Known()
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// the issuer backends the Issuer controllers set Ready with
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	ctx, exit := util.SetupExitHandler(context.Background(), util.GracefulShutdown)
	defer exit()
	logf.InitLogs()
	defer logf.FlushLogs()
	if err := run(ctx); err != nil {
		logf.Log.Error(err, "controller failed")
		util.SetExitCode(err)
	}
}

func run(ctx context.Context) error {
	known := controller.Known()
	all := make([]string, 0, len(known))
	for name := range known {
		all = append(all, name)
	}
	// upstream's defaults (internal/apis/config/controller/v1alpha1)
	opts := controller.ContextOptions{KubernetesAPIQPS: 20, KubernetesAPIBurst: 50}
	opts.CertificateRequestMinimumBackoffDuration = time.Hour
	opts.CertificateRequestMaximumBackoffDuration = 32 * time.Hour
	controllers := strings.Join(sets.List(sets.New(all...)), ",")
	flag.StringVar(&opts.Kubeconfig, "kubeconfig", "", "path to a kubeconfig")
	flag.StringVar(&opts.Namespace, "namespace", "", "watch only this namespace (no ClusterIssuers)")
	flag.StringVar(&opts.ClusterResourceNamespace, "cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets that ClusterIssuers read")
	flag.StringVar(&controllers, "controllers", controllers, "comma-separated controllers to run")
	workers := flag.Int("workers", 5, "workers per controller")
	version := flag.Bool("version", false, "print the module version and exit")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	if *version {
		fmt.Println(moduleVersion())
		return nil
	}
	log := logf.FromContext(ctx, "controller")
	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	enabled := sets.New(strings.Split(controllers, ",")...)
	if opts.Namespace != "" {
		enabled.Delete("clusterissuers")
	}
	log.Info("starting cert-manager controller", "version", moduleVersion(), "controllers", sets.List(enabled))
	g, gctx := errgroup.WithContext(ctx)
	for name, constructor := range known {
		if !enabled.Has(name) {
			continue
		}
		iface, err := constructor(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		g.Go(func() error { return iface.Run(*workers, gctx) })
	}
	base.SharedInformerFactory.Start(gctx.Done())
	base.KubeSharedInformerFactory.Start(gctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())
	err = g.Wait()
	base.HTTP01ResourceMetadataInformersFactory.Shutdown()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	log.Info("control loops exited")
	return err
}
GO

cat > cainjector/main.go <<'GO'
// The cert-manager cainjector: upstream's injectors (pkg/controller/cainjector) in a
// controller-runtime manager, as cmd/cainjector/app.Run wires them, without leader
// election and without the metrics server.
package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/cert-manager/cert-manager/internal/cmd/util"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	cmutil "github.com/cert-manager/cert-manager/pkg/util"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"k8s.io/klog/v2"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	ctx, exit := util.SetupExitHandler(context.Background(), util.GracefulShutdown)
	defer exit()
	logf.InitLogs()
	defer logf.FlushLogs()
	if err := run(ctx); err != nil {
		logf.Log.Error(err, "cainjector failed")
		util.SetExitCode(err)
	}
}

func run(ctx context.Context) error {
	// --kubeconfig is controller-runtime's own flag (read by ctrl.GetConfig)
	namespace := flag.String("namespace", "", "watch only this namespace")
	version := flag.Bool("version", false, "print the module version and exit")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()
	if *version {
		fmt.Println(moduleVersion())
		return nil
	}
	ctrl.SetLogger(logf.Log)
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// the injectors' field manager is the user agent's prefix, as upstream sets it
	restConfig = cmutil.RestConfigWithUserAgent(restConfig, "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	var namespaces map[string]cache.Config
	if *namespace != "" {
		namespaces = map[string]cache.Config{*namespace: {}}
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{ReaderFailOnMissingInformer: true, DefaultNamespaces: namespaces},
		// as upstream: Secrets are read directly, never cached
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return err
	}
	logf.Log.Info("starting cert-manager cainjector", "version", moduleVersion())
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    *namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
GO

for b in controller cainjector; do
  cat > "$b/version.go" <<'GO'
package main

import "runtime/debug"

// moduleVersion is the version of github.com/cert-manager/cert-manager compiled in.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/cert-manager/cert-manager" {
				return dep.Path + "@" + dep.Version
			}
		}
	}
	return "unknown"
}
GO
done

go mod edit -require="github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION"
log "resolving modules (go mod tidy)"
go mod tidy >"$work/tidy.log" 2>&1 || { cat "$work/tidy.log" >&2; log "ERROR: go mod tidy failed"; exit 1; }
mkdir -p "$out/bin" "$out/crds"
ldflags="-s -w"
for b in controller cainjector; do
  log "compiling $b (go build)"
  go build -trimpath -ldflags "$ldflags -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$CERT_MANAGER_VERSION" \
    -o "$out/bin/$b.new" "./$b"
  mv "$out/bin/$b.new" "$out/bin/$b"
done
src="$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"
cp "$src"/deploy/crds/*.yaml "$out/crds/"
rm -f "$out/crds/README.md"
chmod -R u+w "$out/crds"
printf 'CERT_MANAGER_VERSION=%s\n' "$CERT_MANAGER_VERSION" > "$out/VERSIONS"
log "done: $("$out/bin/controller" --version)"
echo "$out"
