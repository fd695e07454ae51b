# The tether image used by manifests/skr and manifests/kcp (image: tether:0.2.0):
#   make image          (hack/build-image.sh: buildah, no Docker engine needed)
#   docker build -t tether:0.2.0 .
# One image, one command per part: `tether webhook|listener|janitor|poller|compass|enroller|admin|injector|canary`. The
# ENTRYPOINT is empty, so a Pod's `command: ["tether", "webhook"]` or
# `args: ["tether", "compass"]` is the whole command line. tests/foundation/test_image.py
# builds it and checks its config and layers (docs/development.md "The image").
#
# BASE_IMAGE: the official python:3.11-slim. Where no container registry is reachable,
# hack/build-image.sh passes a stand-in built from Debian's packages (bookworm + its
# python3.11). Both stages use the same base, so the virtualenv's interpreter path holds.
# By digest: hack/build-image.sh builds on the digest of the base it has (a tag is resolved
# and said loudly, with the line to pin here: ARG BASE_IMAGE=python:3.11-slim@sha256:...),
# and labels the image with it (org.opencontainers.image.base.name/.digest). No registry is
# reachable where this was written, so the digest is not pinned here yet (docs/security.md).
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
# How pip reaches PyPI where the machine needs more than the default: hack/build-image.sh
# bind-mounts a pip.conf (index, CA file) into the RUN steps and passes its path. Build
# stage only: neither the file nor its settings reach the final image.
ARG PIP_CONFIG_FILE
RUN python3 -m venv /opt/tether
WORKDIR /src
# the runtime dependencies first: this layer is reused while only the code changes.
# requirements.lock holds every runtime package (direct and indirect, at constraints.txt's
# versions, the ones CI tested) with the sha256 of each of its files on PyPI, and
# requirements-build.lock the setuptools that builds tether below (`make lock`): pip
# refuses any file whose hash is not listed, and resolves nothing itself (--no-deps)
COPY requirements.lock requirements-build.lock ./
RUN /opt/tether/bin/pip install --no-cache-dir -q --require-hashes --no-deps \
      -r requirements.lock -r requirements-build.lock
# the product packages only (setup.cfg [options.packages.find]); .dockerignore keeps the
# test harness (testing/), tests/, bench/, hack/ and standins/ out of the context anyway
COPY setup.cfg pyproject.toml README.md ./
COPY command command
COPY tether tether
COPY webhook webhook
COPY listener listener
COPY poller poller
COPY compass compass
COPY enroller enroller
COPY admin admin
COPY injector injector
COPY canary canary
# built with the hashed setuptools above (no build isolation: nothing unhashed is fetched),
# then the build tools and the virtualenv's own installer go: the image installs nothing
# at run time
RUN /opt/tether/bin/pip install --no-cache-dir -q --no-deps --no-build-isolation . \
 && /opt/tether/bin/pip uninstall -q -y pip setuptools

FROM ${BASE_IMAGE}
COPY --from=build /opt/tether /opt/tether
# non-root, matching runAsUser/runAsGroup 65532 in the manifests; the root filesystem is
# read-only there, so nothing is written outside mounted volumes and /tmp
USER 65532:65532
ENV PATH=/opt/tether/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
ENTRYPOINT []
CMD ["tether", "--help"]
