"""The sender refuses, at start-up and with the variable named, timings its leases cannot cover
and a media reuse shorter than its first poll."""

from __future__ import annotations

import re
from typing import Any

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


@pytest.mark.parametrize(("field", "bad", "why"), [
    ("gateway_timeout_s", 0, "0 is no timeout at all"),
    ("gateway_timeout_s", -1.5, "0 is no timeout at all"),
    ("lease_ttl_s", 0, "every send would miss its send deadline"),
    ("tenants_refresh_s", 0, "the tenant table would be read from Postgres again and again"),
    ("limits_refresh_s", 0, "guid_limits would be read from Postgres again and again"),
    ("limits_refresh_s", -1, "guid_limits would be read from Postgres again and again"),
    ("retry_base_s", 0, "retried at once, without any backoff"),
    ("max_attempts", 0, "every item is tried at least once"),
    ("max_attempts", -3, "every item is tried at least once"),
    ("db_pool_max", 1, "keeps 2 connections open"),
])
def test_a_value_the_sender_cannot_work_with_is_refused_naming_the_variable_and_why(
        monkeypatch: pytest.MonkeyPatch, field: str, bad: float, why: str) -> None:
    variable = f"PACER_SENDER_{field.upper()}"
    bound = "at least" if field in ("max_attempts", "db_pool_max") else "greater than 0"
    given: dict[str, Any] = {field: bad}
    with pytest.raises(ValidationError, match=re.escape(f"{variable} must be {bound}")) as err:
        SenderSettings(**given)
    assert why in str(err.value)
    monkeypatch.setenv(variable, str(bad))  # as the environment gives it
    with pytest.raises(ValidationError, match=re.escape(why)):
        SenderSettings()


def test_the_least_workable_values_are_taken() -> None:
    cfg = SenderSettings(gateway_timeout_s=0.001, lease_ttl_s=0.004, claim_ahead_ms=0, step_linger_spare_ms=0,
                         tenants_refresh_s=0.01, limits_refresh_s=0.01, retry_base_s=0.001, max_attempts=1,
                         db_pool_max=2)
    assert (cfg.gateway_timeout_s, cfg.max_attempts, cfg.db_pool_max) == (0.001, 1, 2)
