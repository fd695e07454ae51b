"""``tether enroller --dry-run`` and ``--uninstall`` (issue 42 item 3) are flags of the
command (its help lists them); what they do is shown on planes in test_pilot.py."""

from __future__ import annotations

import pytest

from enroller import main


def test_the_enroller_offers_a_dry_run_and_an_uninstall(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--dry-run" in out and "writes nothing" in out
    assert "--uninstall" in out and "release the finalizers" in out
    assert "--once" in out
