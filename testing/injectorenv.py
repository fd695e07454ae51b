"""What the injector's tests share: the group of their own Sample CRD
(``loopenv.sample_crd(GROUP)``, not the loop tests' ``SAMPLE_GROUP``) and a fresh namespace
in the KCP for a test's Watches, records and targets."""

from __future__ import annotations

import uuid

from kubernetes import client

from testing import controlplane

GROUP = "sample.injector.tether-test.example.com"


def new_namespace(api: client.ApiClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    controlplane.retry_busy(
        lambda: client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
    )
    return name
