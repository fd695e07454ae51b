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

$(STAMP): requirements.txt requirements-dev.txt constraints.txt setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP) ## create .venv with the pinned requirements and tether installed (editable)

constraints: $(STAMP) ## rewrite constraints.txt from the venv (after changing requirements*.txt)
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

controlplane: ## build (or reuse the cached) etcd, kube-apiserver and kubectl from Go modules
	bash hack/build-controlplane.sh

promtool: ## install promtool (Debian's prometheus package) if missing; checks the alert rules
	@command -v promtool >/dev/null || { \
	  echo "installing promtool (Debian package prometheus)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

image-tools: ## install buildah, podman, runc and debootstrap (Debian packages) if missing
	bash hack/install-image-tools.sh

image: image-tools ## build the product image tether:<setup.cfg version> with buildah (no Docker engine)
	bash hack/build-image.sh

lint: $(STAMP) ## ruff, mypy (strict on the product packages) and the import contracts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: $(STAMP) ## fast tests of pure logic only
	$(VENV)/bin/pytest -m "not slow" tests/unit

test: $(STAMP) controlplane promtool image-tools lint ## everything CI runs: lint, type checks, all tests on real control planes
	$(VENV)/bin/pytest

demo: $(STAMP) controlplane ## run the whole system locally (two planes, all parts)
	$(PY) hack/demo.py

planes: $(STAMP) controlplane ## only start local SKR and KCP planes and print their kubeconfigs
	$(VENV)/bin/tether controlplane

clean: ## remove the venv and caches (not the control plane cache)
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build *.egg-info


.PHONY: help venv constraints controlplane promtool image-tools image lint unit test demo planes clean
