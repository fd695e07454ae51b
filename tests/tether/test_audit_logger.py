"""``tether.base.logs.audit_logger`` has one path, the queued writer
(``tether.base.auditwriter``): it cannot be built without counting what it loses, and each
part's lost counter exports every reason from the start. Plain data, no processes."""

from __future__ import annotations

import logging
import pathlib

import prometheus_client as prom
import pytest

from tether.base import auditwriter, logs


def test_an_audit_logger_without_on_lost_cannot_be_built() -> None:
    with pytest.raises(TypeError, match="on_lost"):
        logs.audit_logger("stdout")  # type: ignore[call-arg]


def test_the_audit_logger_queues_and_counts_what_it_cannot_write(tmp_path: pathlib.Path) -> None:
    registry = prom.CollectorRegistry()
    lost = auditwriter.lost_counter("tether_test_audit_lost", registry)
    for reason in auditwriter.REASONS:
        assert registry.get_sample_value("tether_test_audit_lost_total", {"reason": reason}) == 0
    logger = logs.audit_logger(
        str(tmp_path / "audit.jsonl"), on_lost=auditwriter.counting(lost), queue_lines=50
    )
    try:
        handler = logger.handlers[0]
        assert isinstance(handler, auditwriter.QueuedHandler) and len(logger.handlers) == 1
        logs.audit(logger, "written", key="k")
        handler.flush()
        assert '"event":"written"' in (tmp_path / "audit.jsonl").read_text()
        assert (
            registry.get_sample_value("tether_test_audit_lost_total", {"reason": "write_error"})
            == 0
        )
        handler.close()
        if not pathlib.Path("/dev/full").exists():
            pytest.fail("/dev/full is missing: the full-disk case cannot be shown here")
        logger = logs.audit_logger("/dev/full", on_lost=auditwriter.counting(lost))  # full disk
        handler = logger.handlers[0]
        for _ in range(3):
            logs.audit(logger, "lost", key="k")
        handler.flush()
        assert (
            registry.get_sample_value("tether_test_audit_lost_total", {"reason": "write_error"})
            == 3
        )
    finally:
        for h in logger.handlers:
            h.close()
        logger.handlers[:] = []
        logging.getLogger(logs.AUDIT_LOGGER).handlers[:] = []
