"""Runbook links of the admin pages and ``tether status`` (pure): every problem and refusal
reason they show points at its section of docs/operations.md, and the refusals of a runtime
as shown, each with its last refused object and when.

A link is ``<base>/docs/operations.md#<anchor>``, ``base`` the admin setting
``TETHER_ADMIN_RUNBOOK_BASE``, by default the docs of the running version (``DEFAULT_BASE``:
the release's tag ``<version>``, ``running_version`` read from the installed package; a
version that is no plain ``X.Y.Z``, a development build, or none at all links ``main``), as
``make release`` pins the alerts' ``runbook_url`` base
(manifests/monitoring/runbooks/runbook-base.yaml, hack/release.py). The sections are headed
``Refusal `<reason>``` and ``Problem `<problem>```; the anchor is the one GitHub renders for
such a heading (``slug``): ``refusal-invalid_json``, ``problem-silent``. A reason that is no
plain code (a status written by hand, a future version) links to ``Refusal `other```.
tests/admin/test_runbooks.py keeps a section for every reason of the listener's reason sets
and every problem.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from tether.wire import delivery

DOC = "docs/operations.md"
REPOSITORY = "https://github.com/kyma-project/tether"
MAIN = "main"
TAG_PREFIX = ""  # a release is the tag <version>, X.Y.Z (docs/releasing.md, hack/release.py)
_RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
OTHER = "other"
NO_OBJECT = "(the runtime's request; no object read)"
_CODE = re.compile(r"[a-z0-9_]{1,40}")


def ref_of(version: str | None) -> str:
    """The git ref of a version's docs: its tag for a release ``X.Y.Z``, else ``main``
    (a development version such as ``0.2.0.dev3`` or ``0.1.0+g1a2b``, or none known)."""
    return TAG_PREFIX + version if version and _RELEASE.fullmatch(version) else MAIN


def base_of(version: str | None) -> str:
    return f"{REPOSITORY}/blob/{ref_of(version)}"


def running_version() -> str | None:
    try:
        return importlib.metadata.version("tether")
    except importlib.metadata.PackageNotFoundError:
        return None


DEFAULT_BASE = base_of(running_version())
DEFAULT_TEXT = f"{REPOSITORY}/blob/{TAG_PREFIX}<version> (main for a development version)"


def slug(heading: str) -> str:
    """The anchor GitHub renders for a Markdown heading: lowercased, every character but
    letters, digits, ``_``, ``-`` and spaces dropped (backticks too), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def refusal_heading(reason: str) -> str:
    return f"Refusal `{reason}`"


def problem_heading(problem: str) -> str:
    return f"Problem `{problem}`"


def refusal_anchor(reason: str) -> str:
    return slug(refusal_heading(reason if _CODE.fullmatch(reason) else OTHER))


def problem_anchor(problem: str) -> str:
    return slug(problem_heading(problem if _CODE.fullmatch(problem) else OTHER))


class Links(NamedTuple):
    """The runbook URLs under one base (no trailing slash)."""

    base: str = DEFAULT_BASE

    def anchor(self, anchor: str) -> str:
        return f"{self.base}/{DOC}#{anchor}"

    def refusal(self, reason: str) -> str:
        return self.anchor(refusal_anchor(reason))

    def problem(self, problem: str) -> str:
        return self.anchor(problem_anchor(problem))


class Refused(NamedTuple):
    """One refusal reason of a runtime as shown: the hour's count, its newest refusal."""

    reason: str
    refused: int  # in the last hour
    at: datetime.datetime | None  # None: not known (an object of an older version)
    status: int  # 0: not known
    object: str  # namespace/name, or what is known
    runbook: str


def object_text(entry: Mapping[str, Any] | None) -> str:
    """The refused object of a ``lastRefused`` entry: ``namespace/name``, else what is known."""
    if not entry:
        return "not recorded"
    name = entry.get("name")
    if isinstance(name, str) and name:
        return f"{entry.get('namespace', '')}/{name}"
    return NO_OBJECT


def refusals(summary: delivery.Summary, links: Links) -> list[Refused]:
    """The reasons refused in the last hour, most refused first, each with its last refused
    object and time and its runbook."""
    out = []
    for reason, n in sorted(summary.refused.items(), key=lambda rn: (-rn[1], rn[0])):
        entry = summary.last_refused.get(reason)
        at = delivery.parse(entry.get("at")) if entry else None
        status = entry.get("status", 0) if entry else 0
        out.append(
            Refused(
                reason,
                n,
                at,
                status if isinstance(status, int) else 0,
                object_text(entry),
                links.refusal(reason),
            )
        )
    return out


def as_json(r: Refused) -> dict[str, Any]:
    return {
        "reason": r.reason,
        "count": r.refused,
        "lastAt": None if r.at is None else delivery.fmt(r.at),
        "lastStatus": r.status or None,
        "lastObject": r.object,
        "runbook": r.runbook,
    }
