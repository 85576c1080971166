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
    from pacer_common.domain.quota import DailyUsage

    ends = 1_000_000.0  # the tenants' day ends here, as the database said
    now, tomorrow = ends - 60, ends + 1
    u = DailyUsage()
    assert u.allows("acme", 2, now) and u.allows("acme", None, now)
    u.count("acme")
    u.absorb({"acme": (ends, 0)})
    assert u.used("acme", now) == 1 and u.allows("acme", 2, now)
    sent = u.take()
    assert sent == {"acme": 1} and u.used("acme", now) == 0
    u.absorb({"acme": (ends, 1), "globex": (ends, 5)})
    u.count("acme")
    assert u.used("acme", now) == 2 and not u.allows("acme", 2, now)
    assert u.allows("globex", 6, now) and not u.allows("globex", 5, now)
    assert u.used("globex", tomorrow) == 0  # a day ended: its totals do not count against the next
    assert u.day_ends("globex") == ends and u.day_ends("initech") == 0
    first = u.flush()  # adding it fails: it stays pending, resent as it is
    assert first.sends == {"acme": 1} and u.used("acme", now) == 2
    assert u.flush() == first


def test_a_tenant_past_its_quota_waits_for_the_end_of_its_day_as_the_database_counts_it() -> None:
    import asyncio
    from datetime import UTC, datetime

    from pacer_common.domain.failures import DEFAULT_CODE_TABLE, FailureClass, SendError
    from pacer_common.tenant_gateways import QUOTA_RECHECK_S, UNKNOWN_DAY_RETRY_S, TenantGateways

    midnight = datetime(2026, 12, 6, 16, tzinfo=UTC).timestamp()  # 00:00 on the 7th in Shanghai
    tenants = {"acme": Tenant("acme", "http://127.0.0.1:9", sends_per_day=3)}

    def refusal(wall: float, totals: dict[str, tuple[float, int]], unflushed: int = 0) -> SendError | None:
        gws = TenantGateways(tenants.get, 0.5, DEFAULT_CODE_TABLE, wall=lambda: wall)
        gws.usage.absorb(totals)
        for _ in range(unflushed):
            gws.usage.count("acme")

        async def send() -> SendError | None:
            try:
                await gws.send_text("g1", "t", "hi", "k-1", tenant="acme")
            except SendError as err:
                return err if "quota" in str(err) else None  # else refused by the port nobody listens on
            finally:
                await gws.aclose()
            return None

        return asyncio.run(send())

    err = refusal(midnight - 120, {"acme": (midnight, 3)})
    assert err is not None and err.failure_class is FailureClass.RATE_LIMITED
    assert err.retry_after is not None and err.retry_after.total_seconds() == 120, "until its day ends"
    assert "2026-12-06T16:00:00+00:00" in str(err)
    err = refusal(midnight - 3600, {"acme": (midnight, 3)})
    assert err is not None and err.retry_after is not None and err.retry_after.total_seconds() == QUOTA_RECHECK_S
    assert refusal(midnight + 1, {"acme": (midnight, 3)}) is None, "a new day"
    assert refusal(midnight - 120, {"acme": (midnight, 2)}) is None, "under the quota"
    err = refusal(midnight + 1, {"acme": (midnight, 3)}, unflushed=3)  # its own sends, no total of the new day yet
    assert err is not None and err.retry_after is not None and err.retry_after.total_seconds() == UNKNOWN_DAY_RETRY_S


def test_asking_whether_a_tenant_is_deferred_takes_no_probe_and_calls_nothing() -> None:
    # Asked before each claim: the question must not use up the one probe after the cool-down
    # (no sender's call would then go), nor open a client.
    from pacer_common.domain.failures import DEFAULT_CODE_TABLE
    from pacer_common.tenant_gateways import TenantGateways

    now = [0.0]
    tenants = {"acme": Tenant("acme", "http://127.0.0.1:9", sends_per_day=3), "nourl": Tenant("nourl")}
    gws = TenantGateways(tenants.get, 0.5, DEFAULT_CODE_TABLE, breaker=lambda: Breaker(1, 10.0),
                         clock=lambda: now[0])
    assert gws.deferral("acme") is None and gws.clients == {}
    gws.breaker("acme").record(True, 0.0)  # open
    now[0] = 4.0
    err = gws.deferral("acme")
    assert err is not None and err.deferred and err.retry_after is not None
    assert err.retry_after.total_seconds() == pytest.approx(6.0)
    now[0] = 10.5  # cooled down: the next call is the probe
    assert gws.deferral("acme") is None and gws.deferral("acme") is None
    assert gws.breaker("acme").wait(now[0]) is None, "the question took the probe"
    assert gws.deferral("acme") is not None, "one probe at a time: the others still wait"
    for unknown in ("nourl", "nobody"):
        err = gws.deferral(unknown)
        assert err is not None and err.deferred and "not known here yet" in str(err)
    used = TenantGateways(tenants.get, 0.5, DEFAULT_CODE_TABLE, wall=lambda: 1_000.0)
    used.usage.absorb({"acme": (2_000.0, 3)})  # its quota of 3 used, until 2,000
    quota = used.deferral("acme")
    assert quota is not None and "quota" in str(quota)
    assert used.deferral("acme", counted=False) is None, "a read is no send: no quota"
