"""How lifecycle-manager picks a module's template for a Kyma CR, as plain data (no I/O), so
the module tests read Tether's module back the way lifecycle-manager would:

* the channel: the module entry's ``channel`` in the Kyma CR, else the Kyma CR's
  ``spec.channel``, else ``regular`` (pkg/templatelookup/moduletemplateinfolookup,
  ``getDesiredChannel``);
* the version: that channel's entry in the ModuleReleaseMeta named after the module, in the
  Kyma CR's namespace (pkg/templatelookup ``GetChannelVersionForModule``; a channel it does
  not list is an error);
* the template: ``<module>-<version>`` in the Kyma CR's namespace (common.go
  ``getTemplateByVersion``);
* the component: the ModuleReleaseMeta's ``ocmComponentName`` at the template's
  ``spec.version``, fetched from the registry (testing/ocidist.py ``read_component``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_CHANNEL = "regular"


class NoTemplateError(LookupError):
    """No template for the module in the Kyma CR's channel."""


def desired_channel(kyma: Mapping[str, Any], module: str) -> str:
    spec = kyma.get("spec") or {}
    for entry in spec.get("modules") or []:
        if entry.get("name") == module and entry.get("channel"):
            return str(entry["channel"])
    return str(spec.get("channel") or DEFAULT_CHANNEL)


def channel_version(release_meta: Mapping[str, Any], channel: str) -> str:
    for entry in (release_meta.get("spec") or {}).get("channels") or []:
        if entry.get("channel") == channel:
            return str(entry["version"])
    raise NoTemplateError(
        f"ModuleReleaseMeta {release_meta.get('metadata', {}).get('name')}: no channel {channel!r}"
    )


def template_name(module: str, version: str) -> str:
    return f"{module}-{version}"
