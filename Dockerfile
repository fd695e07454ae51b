# The tether image used by manifests/skr and manifests/kcp (image: tether:0.1.0):
#   docker build -t tether:0.1.0 .
# One image, one command per part: `tether webhook|listener|poller|compass`.
# (Not built in CI here: these machines have no container engine.)
FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements.txt constraints.txt setup.cfg pyproject.toml README.md ./
COPY common common
COPY webhook webhook
COPY listener listener
COPY poller poller
COPY compass compass
# constraints.txt: the indirect versions CI tested (make constraints)
RUN pip install --no-cache-dir --prefix=/install -c constraints.txt -r requirements.txt \
 && pip install --no-cache-dir --prefix=/install --no-deps .

FROM python:3.11-slim
COPY --from=build /install /usr/local
# non-root, matching runAsUser/runAsGroup 65532 in the manifests; the root filesystem is
# read-only there, so nothing is written outside mounted volumes and /tmp
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
ENTRYPOINT []
CMD ["tether", "--help"]
