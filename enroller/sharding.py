"""Runtimes sharded across KCPs: each runtime is installed by exactly one KCP's enroller, the
one whose listener its client Secret names (docs/architecture.md, "Sharding"). The rule is
``decide.ownership`` (pure); this module reads the fact from the runtime and acts on it:

- ``check``: before anything is issued or written into a runtime, one installed for another
  KCP's listener is refused (the failure ``OwnedByAnotherKcp``) unless its Kyma CR here asks for the
  move from exactly that listener (``decide.TAKE_OVER_ANNOTATION``); a takeover is audited;
- ``moved_away``: a Kyma CR deleted in the KCP the runtime moved away from removes nothing
  from the runtime (its new KCP owns every object there now).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from enroller import decide, render
from tether.base import logs
from tether.kube import gateway, kyma

log = logging.getLogger("tether.enroller")


def check(
    own: str,
    audit: logging.Logger,
    view: kyma.KymaView,
    held: Mapping[str, str],
    take_over_from: str | None,
    issued_here: bool = False,
) -> str | None:
    """Why nothing may be written into the runtime (another KCP installed it and no move is
    asked for: the failure ``OwnedByAnotherKcp``'s message), None when this KCP may; a
    takeover is audited. ``held``: the data of the runtime's client Secret (empty: none);
    ``issued_here``: its certificate was issued by this KCP's CA (``decide.ownership``)."""
    installed = decide.installed_listener(held)
    verdict = decide.ownership(
        installed=installed, own=own, take_over_from=take_over_from, issued_here=issued_here
    )
    if verdict == "foreign":
        return (
            f"the runtime is installed for another KCP's listener {installed}; to move it here, "
            f"annotate this Kyma CR {decide.TAKE_OVER_ANNOTATION}={installed}"
        )
    if verdict == "take_over":
        log.info("Kyma %s: taking its runtime over from the listener %s", view.name, installed)
        logs.audit(
            audit, "runtime_taken_over", runtime=view.runtime_id, kyma=view.name, listener=installed
        )
    return None


def moved_away(skr: gateway.Kube, own: str, name: str, timeout: float) -> bool:
    """Whether the runtime of the deleted Kyma CR ``name`` is installed for another KCP's
    listener (one read of its client Secret): then nothing is removed from it."""
    secret = skr.get_or_none(
        gateway.SECRETS, render.NAMESPACE, render.CLIENT_SECRET, timeout=timeout
    )
    installed = decide.installed_listener((secret or {}).get("data") or {})
    if decide.ownership(installed=installed, own=own, take_over_from=None) != "foreign":
        return False
    log.info(
        "Kyma %s deleted: its runtime moved to the listener %s; nothing removed from it",
        name,
        installed,
    )
    return True
