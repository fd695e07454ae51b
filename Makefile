# Tether developer commands. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# requirements-dev.lock: every package of the venv (the runtime set of requirements.lock, the
# dev tools, pip and setuptools) with its hashes; tether itself is built with that setuptools
# (no build isolation: nothing unhashed is fetched)
$(STAMP): requirements.txt requirements-dev.txt constraints.txt requirements.lock requirements-dev.lock setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes --no-deps -r requirements-dev.lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

venv: $(STAMP) ## create .venv with the pinned requirements and tether installed (editable)

constraints: $(STAMP) ## rewrite constraints.txt from the venv (after changing requirements*.txt)
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# pip-compile reads pip's configuration too: find-links (local wheels) would add hashes
# that only this machine knows, so it is left out
PIP_COMPILE := env -u PIP_FIND_LINKS $(VENV)/bin/pip-compile --quiet --generate-hashes \
	--strip-extras --no-emit-index-url --no-emit-trusted-host --no-emit-find-links

lock: $(STAMP) ## rewrite requirements.lock (runtime set, at constraints.txt's versions), requirements-dev.lock (the venv's) and requirements-build.lock with every file's sha256 (after `make constraints`)
	$(PIP_COMPILE) -c constraints.txt -o requirements.lock requirements.txt
	$(PIP_COMPILE) --allow-unsafe -c constraints.txt -o requirements-dev.lock requirements-dev.txt
	$(PIP_COMPILE) --allow-unsafe -o requirements-build.lock requirements-build.txt

controlplane: ## build (or reuse the cached) etcd, kube-apiserver, kubectl and kube-controller-manager from Go modules
	bash hack/build-controlplane.sh

promtool: ## install promtool (Debian's prometheus package) if missing; checks the alert rules
	@command -v promtool >/dev/null || { \
	  echo "installing promtool (Debian package prometheus)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

faketime: ## install libfaketime (Debian package faketime) if missing; the fault suite skews a runtime's clock with it
	@ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || { \
	  echo "installing libfaketime (Debian package faketime)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends faketime >/dev/null; }

image-tools: ## install buildah, podman, runc and debootstrap (Debian packages) if missing
	bash hack/install-image-tools.sh

browser: ## install headless Chromium, its chromedriver and certutil (Debian packages) if missing
	bash hack/install-browser.sh

image: image-tools ## build the product image tether:<setup.cfg version> with buildah (no Docker engine)
	bash hack/build-image.sh

# the image's name in the release's manifests (no tag: they pin it by digest); docs/releasing.md
REGISTRY ?= ghcr.io/kyma-project/tether

release: $(STAMP) controlplane image-tools cosign ## write dist/release/<version>/: the image (OCI archive + digest), manifests pinned by digest to $(REGISTRY), the Kyma module (OCM component, ModuleTemplate, ModuleReleaseMeta), a CycloneDX SBOM, SHA256SUMS, signed with $$TETHER_RELEASE_KEY, SLSA provenance
	TETHER_RELEASE_REGISTRY=$(REGISTRY) $(PY) hack/release.py

# the release folder verify-release checks, and the public key it trusts (default: the folder's)
RELEASE_DIR ?= dist/release/$(shell sed -n 's/^version *= *//p' setup.cfg | head -1)
KEY ?=

verify-release: $(STAMP) cosign ## check a release folder offline (RELEASE_DIR, KEY): signatures, checksums, provenance of the archive
	$(PY) hack/verify_release.py $(RELEASE_DIR) $(if $(KEY),--key $(KEY))

cosign: ## build (or reuse the cached) cosign from its Go module (hack/cosign-version.env)
	bash hack/build-cosign.sh

registry: ## build (or reuse the cached) the CNCF distribution OCI registry from its Go module (hack/registry-version.env; the module tests push to it)
	bash hack/build-registry.sh >/dev/null

lcm-api-check: ## build (or reuse the cached) the Kyma module's check against lifecycle-manager's published api module (hack/lcm-api-version.env; the module tests run it)
	bash hack/build-lcm-api-check.sh >/dev/null

# where push-module pushes the release's Kyma module (https://host[:port]) and the CA file
# that signed that registry's certificate (empty: the system's trust store)
MODULE_REGISTRY ?=
MODULE_REGISTRY_CA ?=

push-module: $(STAMP) ## push a release's Kyma module (RELEASE_DIR) as an OCM component to MODULE_REGISTRY: component-descriptors/<name>:<version> (docs/releasing.md)
	@test -n "$(MODULE_REGISTRY)" || { echo "push-module: set MODULE_REGISTRY=https://host[:port]"; exit 2; }
	$(PY) hack/push_module.py $(RELEASE_DIR) --registry $(MODULE_REGISTRY) $(if $(MODULE_REGISTRY_CA),--ca-file $(MODULE_REGISTRY_CA))

bundle: $(STAMP) controlplane ## regenerate enroller/skr-bundle.yaml (kubectl kustomize manifests/skr) after changing manifests/skr
	{ echo "# Generated by 'make bundle' (kubectl kustomize manifests/skr): the SKR objects the enroller"; \
	  echo "# installs into every runtime. Do not edit; tests/enroller/test_bundle.py keeps it current."; \
	  "$$($(PY) -c 'from testing import controlplane; print(controlplane.binaries())')/kubectl" kustomize manifests/skr; } > enroller/skr-bundle.yaml.new
	mv enroller/skr-bundle.yaml.new enroller/skr-bundle.yaml

lint: $(STAMP) ## ruff (lint and layout), mypy (strict on the product packages) and the import contracts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: $(STAMP) ## lay the tree out with ruff format (what `make lint` checks)
	$(VENV)/bin/ruff format .

# the suite's workers (pytest-xdist): the tests wait far more than they compute, so twice the
# cores; a module stays on one worker (tests/conftest.py, ModuleGroups). `make test WORKERS=1` runs serially.
WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
XDIST := -n $(WORKERS)

unit: $(STAMP) ## tier unit: plain data, no plane, no process (docs/development.md)
	$(VENV)/bin/pytest -n $(UNIT_WORKERS) -m unit

# the unit tier computes: one worker a core
UNIT_WORKERS ?= $(shell nproc)

check: $(STAMP) controlplane ## tiers unit and check: adds the tests on the session's two planes
	$(VENV)/bin/pytest $(XDIST) -m "unit or check"

prometheus-server: ## build (or reuse the cached) upstream Prometheus server from its Go module (the monitoring test)
	bash hack/build-prometheus.sh >/dev/null

cert-manager: ## build (or reuse the cached) cert-manager controller and cainjector from its Go module, with its CRDs (the cert-manager overlay's test)
	bash hack/build-cert-manager.sh >/dev/null

test: $(STAMP) controlplane promtool faketime prometheus-server cert-manager registry lcm-api-check image-tools browser lint ## everything CI runs: lint, type checks, all three tiers on real control planes
	$(VENV)/bin/pytest $(XDIST)

demo: $(STAMP) controlplane ## run the whole system locally (two planes, all parts)
	$(PY) hack/demo.py

planes: $(STAMP) controlplane ## only start local SKR and KCP planes and print their kubeconfigs
	$(PY) -m testing.controlplane_cli

clean: ## remove the venv and caches (not the control plane cache)
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info


.PHONY: release verify-release cosign registry lcm-api-check push-module bundle help venv constraints lock controlplane promtool prometheus-server cert-manager image-tools browser image lint format unit check test demo planes clean
