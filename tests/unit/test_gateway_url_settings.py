"""A gateway URL without its scheme is refused at start-up, with the variable named, by every
service that calls the gateway: taken as it is, every send would fail before it could be known
not to have gone out, and end ``unverified``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pacer_reconciler.settings import ReconcilerSettings
from pacer_sender.settings import SenderSettings

Caller = type[SenderSettings] | type[ReconcilerSettings]
CALLERS: list[Caller] = [SenderSettings, ReconcilerSettings]


@pytest.mark.parametrize("settings", CALLERS, ids=lambda s: s.__name__)
@pytest.mark.parametrize("url", ["wecom-gateway:8080", "wecom-gateway.messaging", "ftp://wecom-gateway",
                                 "http://", "https:///message", " http://wecom-gateway:8080", ""])
def test_a_gateway_url_without_an_http_scheme_and_host_is_refused(
        settings: Caller, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACER_GATEWAY_URL", url)
    with pytest.raises(ValidationError) as refused:
        settings()
    (error,) = refused.value.errors()
    assert error["loc"] == ("PACER_GATEWAY_URL",)
    assert "is not an http:// or https:// URL" in error["msg"] and "e.g. http://wecom-gateway:8080" in error["msg"]


@pytest.mark.parametrize("settings", CALLERS, ids=lambda s: s.__name__)
@pytest.mark.parametrize("url", ["http://wecom-gateway:8080", "https://gw.example/api", "http://10.0.0.7"])
def test_an_http_or_https_gateway_url_is_taken_as_it_is(
        settings: Caller, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACER_GATEWAY_URL", url)
    assert settings().gateway_url == url
