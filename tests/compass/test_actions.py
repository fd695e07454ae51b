"""Every action ``compass.decide`` can choose has exactly one method in the reconciler
(``done``, ``wait`` and ``skip`` end a pass and are handled by ``Reconciler._steps``)."""

from __future__ import annotations

import typing

from compass import decide, reconcile


def test_every_action_kind_has_one_handler() -> None:
    assert set(typing.get_args(decide.ActionKind)) - {"done", "wait", "skip"} == set(reconcile._ACTIONS)
