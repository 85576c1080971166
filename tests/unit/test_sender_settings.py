"""The sender refuses, at start-up and with the variable named, timings its leases cannot cover
and a media reuse shorter than its first poll."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from pacer_sender.settings import SenderSettings


def test_a_gateway_timeout_longer_than_a_quarter_of_the_lease_is_refused() -> None:
    assert SenderSettings(lease_ttl_s=8.0, gateway_timeout_s=2.0).in_flight_s == 4.0
    with pytest.raises(ValidationError, match="PACER_SENDER_GATEWAY_TIMEOUT_S"):
        SenderSettings(lease_ttl_s=8.0, gateway_timeout_s=2.5)


def test_a_claim_ahead_longer_than_a_quarter_of_the_send_deadline_is_refused() -> None:
    # A lease of 3 s: the send deadline is 0.75 s, the longest claim ahead 187.5 ms.
    assert SenderSettings(lease_ttl_s=3.0, gateway_timeout_s=0.5, claim_ahead_ms=150).claim_ahead_ms == 150
    with pytest.raises(ValidationError, match=re.escape("PACER_SENDER_CLAIM_AHEAD_MS (200.0) must be at most a quarter")):
        SenderSettings(lease_ttl_s=3.0, gateway_timeout_s=0.5, claim_ahead_ms=200)


def test_a_confirmation_linger_longer_than_a_quarter_of_the_send_deadline_is_refused() -> None:
    # A lease of 3 s: the send deadline is 0.75 s, the longest linger 187.5 ms.
    assert SenderSettings(lease_ttl_s=3.0, gateway_timeout_s=0.5, claim_ahead_ms=100,
                          step_linger_spare_ms=150).step_linger_spare_ms == 150
    with pytest.raises(ValidationError,
                       match=re.escape("PACER_SENDER_STEP_LINGER_SPARE_MS (200.0) must be at most a quarter")):
        SenderSettings(lease_ttl_s=3.0, gateway_timeout_s=0.5, claim_ahead_ms=100, step_linger_spare_ms=200)


def test_a_media_reuse_no_longer_than_the_first_poll_is_refused() -> None:
    assert SenderSettings(media_poll_after_s=30, media_reuse_s=31).media_reuse_s == 31
    with pytest.raises(ValidationError, match=re.escape("PACER_SENDER_MEDIA_REUSE_S (30.0) must be longer")):
        SenderSettings(media_poll_after_s=30, media_reuse_s=30)
