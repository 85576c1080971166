"""Tenants: the callback signature, the per-tenant breaker, the planner's tenant refusals."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from pacer_common.domain.breaker import Breaker
from pacer_common.domain.requests import JobRequest
from pacer_common.domain.tenants import Tenant, sign, signature_ok
from pacer_planner.domain.admission import tenant_refusal


@given(st.text(min_size=1), st.binary())
def test_a_body_signed_with_the_secret_verifies(secret: str, body: bytes) -> None:
    sig = sign(secret, body)
    assert sig == hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert signature_ok(secret, body, sig)
    assert signature_ok(secret, body, sig.upper())


@given(st.text(min_size=1), st.binary(), st.binary(min_size=1))
def test_a_changed_body_or_another_secret_does_not_verify(secret: str, body: bytes, extra: bytes) -> None:
    sig = sign(secret, body)
    assert not signature_ok(secret, body + extra, sig)
    assert not signature_ok(secret + "x", body, sig)
    assert not signature_ok(secret, body, None)
    assert not signature_ok(secret, body, "")


def test_breaker_opens_after_failures_in_a_row_then_lets_one_probe_through() -> None:
    b = Breaker(threshold=3, cooldown_s=10.0)
    for t in (0.0, 1.0):
        assert b.wait(t) is None
        b.record(True, t)
    b.record(False, 2.0)  # a success breaks the run
    for t in (3.0, 4.0, 5.0):
        assert b.wait(t) is None
        b.record(True, t)
    assert b.is_open
    assert b.wait(6.0) == pytest.approx(9.0)
    assert b.wait(15.0) is None  # the probe
    assert b.wait(15.1) is not None  # only one probe at a time
    b.record(True, 15.2)  # the probe failed: open again, a full cool-down
    assert b.wait(20.0) == pytest.approx(5.2)
    assert b.wait(25.2) is None
    b.record(False, 25.3)
    assert not b.is_open and b.wait(25.4) is None


def test_only_the_default_tenant_takes_the_settings() -> None:
    url, cred, secret = "http://gw", SecretStr("tok-123"), SecretStr("s")
    assert Tenant("default").with_defaults(url, cred, secret) == Tenant("default", url, cred, secret)
    own = Tenant("default", "http://own", SecretStr("mine"))
    assert own.with_defaults(url, cred).base_url == "http://own"
    assert own.with_defaults(url, cred).credential == SecretStr("mine")
    assert Tenant("acme").with_defaults(url, cred, secret) == Tenant("acme")
    assert "tok-123" not in repr(Tenant("default").with_defaults(url, cred))


def test_tenant_refusals_name_the_reason() -> None:
    assert tenant_refusal("acme", True, [], 3, 10) is None
    assert tenant_refusal("acme", True, [], 3, None) is None
    assert "unknown tenant 'nope'" in (tenant_refusal("nope", False, [], 0, None) or "")
    why = tenant_refusal("acme", True, ["g1", "g2"], 3, None) or ""
    assert "'g1' belongs to another tenant" in why and "1 more" in why
    assert "over its quota of 10" in (tenant_refusal("acme", True, [], 11, 10) or "")


REQ = {"request_id": "r", "kind": "campaign", "created_by": "me", "message": {"content": "hi"},
       "targets": {"items": [{"guid": "g", "to_id": "t"}]}}


def test_a_request_names_its_tenant_or_gets_default() -> None:
    assert JobRequest.model_validate(REQ).tenant == "default"
    assert JobRequest.model_validate({**REQ, "tenant": "acme-2"}).tenant == "acme-2"
    for bad in ("", "Acme", "a b", "-x", "x" * 64):
        with pytest.raises(ValidationError):
            JobRequest.model_validate({**REQ, "tenant": bad})


def test_daily_usage_counts_this_senders_sends_on_top_of_the_days_totals() -> None:
    from datetime import date

    from pacer_common.domain.quota import DailyUsage

    today, tomorrow = date(2026, 1, 1), date(2026, 1, 2)
    u = DailyUsage()
    assert u.allows("acme", 2, today) and u.allows("acme", None, today)
    u.count("acme")
    u.absorb({"acme": (today, 0)})
    assert u.used("acme", today) == 1 and u.allows("acme", 2, today)
    sent = u.take()
    assert sent == {"acme": 1} and u.used("acme", today) == 0
    u.absorb({"acme": (today, 1), "globex": (today, 5)})
    u.count("acme")
    assert u.used("acme", today) == 2 and not u.allows("acme", 2, today)
    assert u.allows("globex", 6, today) and not u.allows("globex", 5, today)
    assert u.used("globex", tomorrow) == 0  # yesterday's totals do not count against a new day
    failed = u.take()
    u.restore(failed)  # adding them failed: kept for the next round
    assert u.take() == {"acme": 1}


def test_a_tenant_past_its_quota_waits_for_midnight_in_its_own_time_zone_or_else_the_senders() -> None:
    """15:58 UTC on 6 December is 23:58 in Shanghai: a Shanghai tenant's day ends in two
    minutes, a tenant naming no zone counts the sender's (UTC here), which ends in eight hours."""
    import asyncio
    from datetime import UTC, date, datetime

    from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, SendError
    from pacer_common.tenant_gateways import QUOTA_RECHECK_S, TenantGateways

    before_midnight = datetime(2026, 12, 6, 15, 58, tzinfo=UTC).timestamp()
    after_midnight = before_midnight + 121  # 00:00:01 on the 7th in Shanghai
    tenants = {"east": Tenant("east", "http://127.0.0.1:9", sends_per_day=3, timezone="Asia/Shanghai"),
               "plain": Tenant("plain", "http://127.0.0.1:9", sends_per_day=3)}

    def refusal(tenant: str, wall: float, totals: dict[str, tuple[date, int]]) -> SendError | None:
        gws = TenantGateways(tenants.get, 0.5, DEFAULT_CODE_TABLE, day_zone="UTC", wall=lambda: wall)
        gws.usage.absorb(totals)

        async def send() -> SendError | None:
            try:
                await gws.send_text("g1", "t", "hi", f"k-{tenant}", tenant=tenant)
            except SendError as err:
                return err if "quota" in str(err) else None  # else refused by the port nobody listens on
            finally:
                await gws.aclose()
            return None

        return asyncio.run(send())

    sixth, seventh = date(2026, 12, 6), date(2026, 12, 7)
    err = refusal("east", before_midnight, {"east": (sixth, 3)})
    assert err is not None and err.failure_class is FailureClass.RATE_LIMITED and "Asia/Shanghai" in str(err)
    assert err.retry_after is not None and err.retry_after.total_seconds() == 120
    assert refusal("east", after_midnight, {"east": (sixth, 3)}) is None, "a new day in Shanghai"
    assert refusal("east", after_midnight, {"east": (seventh, 3)}) is not None
    err = refusal("plain", after_midnight, {"plain": (sixth, 3)})
    assert err is not None and "UTC" in str(err), "still the 6th in the sender's zone"
    assert err.retry_after is not None and err.retry_after.total_seconds() == QUOTA_RECHECK_S
    assert refusal("plain", before_midnight, {"plain": (sixth, 2)}) is None, "under the quota"


def test_a_tenant_zone_this_process_does_not_know_leaves_its_days_to_the_senders_zone(
        caplog: pytest.LogCaptureFixture) -> None:
    from pacer_common.db.tenants import usable_zone

    assert usable_zone("acme", "Asia/Shanghai") == "Asia/Shanghai"
    assert usable_zone("acme", None) is None
    assert usable_zone("acme", "Mars/Olympus") is None
    assert "Mars/Olympus" in caplog.text and "acme" in caplog.text
