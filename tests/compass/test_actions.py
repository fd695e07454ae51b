"""Every action ``compass.decide`` can choose has exactly one method in the reconciler,
``Reconciler._<kind>`` (``done``, ``wait`` and ``skip`` end a pass and are handled by
``Reconciler._steps``)."""

from __future__ import annotations

import typing

from compass import decide, reconcile


def test_every_action_kind_has_one_handler() -> None:
    kinds = set(typing.get_args(decide.ActionKind)) - set(reconcile.FINAL)
    missing = {k for k in kinds if not callable(getattr(reconcile.Reconciler, "_" + k, None))}
    assert kinds and not missing, missing
    assert {"keep_secret", "report_pending"} <= kinds
