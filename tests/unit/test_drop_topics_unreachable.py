"""A run's last step, deleting its topics, does not hide how the run ended when the broker is gone."""

from __future__ import annotations

import logging

import pytest

from pacer_dev.fakegateway.process import free_port
from pacer_dev.stack import drop_topics_or_warn


def test_an_unreachable_broker_leaves_the_topics_with_a_warning_instead_of_raising(
        caplog: pytest.LogCaptureFixture) -> None:
    config = {"bootstrap.servers": f"127.0.0.1:{free_port()}"}  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="pacer_dev.stack"):
        drop_topics_or_warn(config, "tgone", timeout_s=1.0)
    assert any("topics tgone.* not deleted" in r.getMessage() for r in caplog.records)
