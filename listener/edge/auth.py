"""Authorization of a runtime's request: a pure decision over plain data.

The caller's certificate chain is already verified (``peer``). Here: the certificate's CN
must equal the runtime ID of the path, exactly one Kyma CR must carry that runtime ID in its
``kyma-project.io/runtime-id`` label, it must not be being deleted, and one of the
certificate's DNS SANs must equal its ``skr-domain`` annotation (DNS names compare
case-insensitively, a trailing dot ignored). Every refusal has a short reason code, used as
the audit reason and the metric label (a fixed set, see ``REASONS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from tether.kube import kyma

REASONS = (
    # 401, no usable certificate (see peer.NoCertificate)
    "no_certificate",
    "xfcc_untrusted_peer",
    "xfcc_malformed",
    "xfcc_chain_invalid",
    # 403
    "cn_mismatch",
    "unknown_runtime",
    "ambiguous_runtime",
    "runtime_deleting",
    "domain_missing",
    "san_mismatch",
    "runtime_id_mismatch",
)


# Refusals of a certificate whose chain verified: the CA issued it to the runtime its CN
# names, so the refusal is counted against that runtime (its page, ``tether status``, the
# alert TetherRuntimeRefused) when a Kyma CR carries that runtime ID. ``unknown_runtime`` is
# not: no runtime to count it against (a deleted runtime's certificate that still verifies).
ATTRIBUTED = (
    "cn_mismatch",
    "ambiguous_runtime",
    "runtime_deleting",
    "domain_missing",
    "san_mismatch",
)


class Refusal(NamedTuple):
    status: int
    reason: str
    message: str


def _dns(name: str) -> str:
    return name.strip().rstrip(".").lower()


def check_cn(cn: str | None, runtime_id: str) -> Refusal | None:
    """The first check, before any lookup: the certificate names this runtime."""
    if cn != runtime_id:
        return Refusal(403, "cn_mismatch", "certificate CN does not match the runtime ID")
    return None


def authorize(
    cn: str | None, dns_sans: Sequence[str], runtime_id: str, kymas: Sequence[kyma.KymaView]
) -> Refusal | None:
    """None when the certificate may act for ``runtime_id``, else the refusal."""
    refusal = check_cn(cn, runtime_id)
    if refusal is not None:
        return refusal
    if not kymas:
        return Refusal(403, "unknown_runtime", "no Kyma resource for this runtime ID")
    if len(kymas) > 1:
        return Refusal(403, "ambiguous_runtime", "more than one Kyma resource has this runtime ID")
    k = kymas[0]
    if k.deleting:
        return Refusal(403, "runtime_deleting", "the runtime's Kyma resource is being deleted")
    if not k.domain:
        return Refusal(403, "domain_missing", "the runtime's Kyma resource has no skr-domain")
    if _dns(k.domain) not in {_dns(s) for s in dns_sans}:
        return Refusal(403, "san_mismatch", "no certificate DNS SAN matches the runtime's domain")
    return None


def attributed(reason: str, cn: str | None, known: bool) -> str | None:
    """The runtime a refusal of a verified certificate counts against: the one its CN names,
    when ``known`` (a Kyma CR carries it) and the reason is one of ``ATTRIBUTED``; else None
    (no certificate, or nothing to count it against). The path's runtime ID, which the
    caller chose, never decides: a runtime can only add to its own count."""
    if reason not in ATTRIBUTED or not cn or not known:
        return None
    return cn
