"""One record model (issue 40): where the product still tells the record generations apart.

The v1 record of the release before Watches is converted in ``tether.wire.conversion`` at the
sender's exit and the listener's intake. The floors not moved yet are listed in ``PENDING``
with what each still needs; a marker in any other product file fails, and a file of
``PENDING`` that no longer has one must leave the list, so it only shrinks.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = (
    *("admin", "canary", "command", "compass", "enroller"),
    *("injector", "listener", "poller", "tether", "webhook"),
)
MARKERS = re.compile(
    r"in_force is None|watch is None|API_VERSION_V2|before Watches|no Watch list"
    r"|watches is None|ws is None|listed is None"
)
# the conversion itself, and the record's own version (its schema, its literal)
EDGE = {"tether/wire/conversion.py", "tether/wire/changes.py"}
PENDING = {
    # a KCP without the Watch CRD renders runtimes as before Watches (no tether-watches)
    "enroller/install.py": "the built-in Watch rendered instead of no list",
    "enroller/reconcile.py": "idem",
    "enroller/render.py": "idem",
    "enroller/watching.py": "idem",
    # records stored before Watches (no Watch label): read, then deleted by the janitor
    "listener/storage/records.py": "the stored shape converted on read (conversion)",
    "listener/storage/store.py": "a filter, None: every Watch (the marker's words only)",
    "listener/janitor/legacy.py": "the janitor's migration of stored legacy records",
    "listener/janitor/metrics.py": "idem",
    "listener/edge/readdoc.py": "idem (the read contract's docs)",
    "listener/edge/api.py": "its own Watch list not read yet (not a record generation)",
}


def _marked() -> set[str]:
    out = set()
    for top in PRODUCT:
        for path in (ROOT / top).rglob("*.py"):
            if MARKERS.search(path.read_text(encoding="utf-8")):
                out.add(path.relative_to(ROOT).as_posix())
    return out


def test_generations_are_told_apart_only_at_the_edges_and_the_pending_floors() -> None:
    marked = _marked()
    assert marked - EDGE - set(PENDING) == set(), "convert in tether.wire.conversion instead"
    assert set(PENDING) - marked == set(), "converted: remove it from PENDING"
    assert not any(p.startswith(("webhook/", "tether/")) for p in marked - EDGE)
