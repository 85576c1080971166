"""What the gateway client reads from an HTTP answer without a server: the quiet a rate limit's
``Retry-After`` asks for, a redirect it does not follow, a body no parser survives."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from pacer_common.domain.failures import DEFAULT_CODE_TABLE, RETRY_AFTER_MAX, FailureClass, SendError
from pacer_common.gateway import GatewayClient, make_client, retry_after
from pacer_common.tenant_gateways import _gateway_failure

F = FailureClass
WALL = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()


def http_date(seconds_from_wall: float) -> str:
    return format_datetime(datetime.fromtimestamp(WALL + seconds_from_wall, UTC), usegmt=True)


def answer(status: int, body: object = b"", location: str | None = None,
           path: str = "/message/sendText") -> SendError:
    """The error a client makes of this answer (fails if it makes none)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    gw = GatewayClient(make_client("http://gw.example:8780", 1.0), DEFAULT_CODE_TABLE)
    with pytest.raises(SendError) as err:
        gw._answered(path, status, raw, location)
    return err.value


@pytest.mark.parametrize(("header", "seconds"), [
    ("60", 60.0), (" 5 ", 5.0), ("1.5", 1.5),
    (http_date(30), 30.0),  # an HTTP-date: the time until then
    ("99999999", RETRY_AFTER_MAX.total_seconds()), (http_date(7 * 86400), RETRY_AFTER_MAX.total_seconds()),
    ("9" * 400, RETRY_AFTER_MAX.total_seconds()),
])
def test_a_retry_after_is_read_as_delta_seconds_or_an_http_date_and_bounded(header: str, seconds: float) -> None:
    assert retry_after(header, WALL) == timedelta(seconds=seconds)


@pytest.mark.parametrize("header", [None, "", "0", "-5", "soon", "1e3", "nan", "inf", "0x10", http_date(-30),
                                    "Wed, 99 Foo 2026 99:99:99 GMT"])
def test_a_retry_after_not_understood_or_already_past_asks_for_nothing(header: str | None) -> None:
    assert retry_after(header, WALL) is None


def test_a_retry_after_in_an_http_date_without_a_zone_is_read_as_utc() -> None:
    naive = datetime.fromtimestamp(WALL + 90, UTC).strftime("%a, %d %b %Y %H:%M:%S -0000")
    assert retry_after(naive, WALL) == timedelta(seconds=90)


@pytest.mark.parametrize("status", [301, 302, 307, 308, 300, 304])
def test_a_redirect_is_not_sent_named_by_its_target_and_a_failure_of_the_gateway(status: int) -> None:
    """An ingress that takes only HTTPS (or a moved route) answered instead of the gateway:
    nothing acted on the request. Not in doubt (every send would wait for a lookup that hits
    the same redirect, then a person); counted by the tenant's breaker like a refused route."""
    err = answer(status, b"<html>Moved</html>", "https://gw.example/message/sendText")
    assert (err.failure_class, err.code) == (F.NOT_SENT, None)
    assert f"HTTP {status}" in err.message and "redirected to https://gw.example/message/sendText" in err.message
    assert _gateway_failure(err), "counted by the tenant's breaker as its gateway failing"


def test_a_redirect_to_a_relative_location_names_the_whole_target() -> None:
    err = answer(308, b"", "/v2/message/sendText")
    assert "redirected to http://gw.example:8780/v2/message/sendText" in err.message
    assert "(no Location)" in answer(301).message


def test_a_303_points_at_the_result_of_a_request_handled_so_it_stays_in_doubt() -> None:
    assert answer(303, b"", "/results/1").failure_class is F.IN_DOUBT


def test_a_redirect_is_logged_once_per_target(caplog: pytest.LogCaptureFixture) -> None:
    gw = GatewayClient(make_client("http://gw.example", 1.0), DEFAULT_CODE_TABLE)
    for location in ["https://gw.example/message/sendText"] * 5 + ["https://other.example/"]:
        with pytest.raises(SendError):
            gw._answered("/message/sendText", 301, b"", location)
    logged = [r.getMessage() for r in caplog.records if r.name == "pacer_common.gateway"]
    assert len(logged) == 2, logged
    assert "redirect to https://gw.example/message/sendText" in logged[0]
    assert "redirect to https://other.example/" in logged[1]


@pytest.mark.parametrize(("body", "cause"), [
    (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),  # nested deeper than the parser goes
    (b'{"code": 1e999, "msg": "x"}', "OverflowError"),  # a code of infinity
    (b'{"code": 0, "data": "not an object"}', "ValueError"),
    (b"\"\xc3\x28\"", "UnicodeDecodeError"),  # not UTF-8
    (b'{"code": 0, "msg": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "RecursionError"),
])
def test_a_body_no_parser_survives_is_an_unreadable_answer_in_doubt(body: bytes, cause: str) -> None:
    """The request reached the gateway and something came back: in doubt, verified, never an
    internal error of the sender (which would leave the item submitted until its lease ran out)."""
    err = answer(200, body)
    assert (err.failure_class, err.code) == (F.IN_DOUBT, None)
    assert err.message.startswith(f"unreadable gateway response ({cause})")
    assert isinstance(err.__cause__, Exception)


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b'{"code": 1e999}'])
def test_a_refusal_whose_body_no_parser_survives_is_classified_by_its_status(body: bytes) -> None:
    assert answer(404, body).failure_class is F.NOT_SENT
    assert answer(400, body).failure_class is F.BAD_PARAMS
    assert answer(409, body).failure_class is F.IN_DOUBT
