"""A real Prometheus scrapes a running stack (the callback intake too) through a small job:
every board's panel query returns series, or is empty for a reason this test proves; every
alert rule loads healthy and every metric its expression names is exported."""

from __future__ import annotations

import hmac
import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from pacer_dev import boards, prometheus
from pacer_dev.stack import LOCAL_CALLBACK_SECRET, Stack
from tests.e2e.conftest import gateway
from tests.e2e.helpers import job_state, publish, request
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.e2e

# Panels that may stay empty in a short, healthy run, each with the query that proves why:
# the proof must return data while the panel returns none.
EMPTY_BECAUSE = {
    # The top-N tables list guids with queued work: once the run's items are all sent there
    # are none, and the leader exports no series (while it does lead).
    "Guids with the largest backlog (top N)":
        "absent(pacer_reconciler_guid_backlog_top) and on () (pacer_reconciler_leader == 1)",
    "Guids with the oldest waiting item (top N)":
        "absent(pacer_reconciler_guid_wait_top_seconds) and on () (pacer_reconciler_leader == 1)",
    # No server error, no expired item, no intercepted duplicate, no deferral happened:
    # the counters exist, those label values never occurred.
    "Control API 5xx by route":
        'absent(pacer_control_requests_total{status=~"5.."}) and on () count(pacer_control_requests_total)',
    "Sends intercepted by the idempotency ledger (last hour)":
        'absent(pacer_sender_items_total{outcome="duplicate"}) and on () count(pacer_sender_items_total)',
    "Expired before sending, by kind":
        'absent(pacer_sender_items_total{outcome="expired"}) and on () count(pacer_sender_items_total)',
    "Expired and abandoned items of open jobs":
        'absent(pacer_reconciler_open_job_items{status=~"expired|abandoned"}) and on () '
        "count(pacer_reconciler_open_job_items)",
    "Not sent: deferred or put back":
        'absent(pacer_sender_items_total{outcome=~"rate_limited|deadline_missed|expiring|guid_lost|held|not_pending|yielded"}) '
        "and on () count(pacer_sender_items_total)",
    "Fenced and duplicate outcomes":
        'absent(pacer_sender_items_total{outcome=~"fenced|duplicate"}) and on () count(pacer_sender_items_total)',
}
_NAME = re.compile(r"\b((?:pacer|process|python)_[a-z0-9_]+|up)\b(?!\s*\()")


def _control(stack: Stack, path: str) -> int:
    with urllib.request.urlopen(f"{stack.procs['control'].url}{path}", timeout=10) as resp:
        return resp.status


def _callback(stack: Stack, body: bytes, signature: str) -> int:
    req = urllib.request.Request(f"{stack.procs['intake'].url}/callbacks/default", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "X-Signature": signature})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _quota(stack: Stack, sends_per_day: int | None) -> None:
    with psycopg.connect(stack.infra.database_url) as conn:
        conn.execute("UPDATE tenants SET sends_per_day = %s WHERE name = 'default'", (sends_per_day,))


@pytest.fixture
def quota(stack: Stack) -> Iterator[None]:
    """A daily quota far above the run's sends on the default tenant: the quota's gauges have a
    tenant to show. Taken off afterwards."""
    _quota(stack, 10_000_000)
    yield
    _quota(stack, None)


def test_every_panel_and_alert_has_data_on_a_running_stack(stack: Stack, quota: None) -> None:
    stack.start_service("control")
    if "intake" not in stack.procs:
        stack.start_intake()
    # A callback signed but unreadable (dead-lettered), and one signed with another secret.
    malformed = b'{"cmd": "message.received"}'
    assert _callback(stack, malformed, hmac.new(LOCAL_CALLBACK_SECRET.encode(), malformed, "sha256").hexdigest()) == 400
    assert _callback(stack, malformed, "0" * 64) == 401
    rid = f"prom-{uuid.uuid4().hex[:8]}"
    # One guid the gateway refuses with a code of the table, one with a code it does not know.
    gateway(stack, "/_admin/config", "PUT", {"fail_guids": {f"{rid}-g0": 40001, f"{rid}-g1": 777}})
    prom = prometheus.Client(stack.start_prometheus(interval_s=1.0).url)

    now = datetime.now(UTC)
    req = request(24, 6, rid)
    later = request(3, 1) | {"not_before": (now + timedelta(minutes=30)).isoformat()}  # keeps a job open
    reply = request(2, 2) | {"kind": "auto_reply", "source_msg_uid": f"m-{rid}"}
    publish(stack, json.dumps(req).encode(), json.dumps(req).encode(), b"{not json", json.dumps(later).encode(),
            json.dumps(reply).encode())
    wait_for(lambda: (s := job_state(stack, rid)) and s[1].get("confirmed", 0) >= 16 and s[1].get("failed", 0) >= 4,
             120, "the job's sends to the good guids confirmed, the refused ones failed")
    assert _control(stack, "/readyz") == 200

    def missing() -> list[str]:
        out = []
        for uid, title, expr in boards.queries():
            if prom.query(expr):
                continue
            proof = EMPTY_BECAUSE.get(title)
            if proof is None or not prom.query(proof):
                out.append(f"{uid} / {title}: {expr}")
        return out

    last: list[str] = []

    def all_present() -> bool:
        nonlocal last
        last = missing()
        return not last

    try:
        wait_for(all_present, 45, "every panel query to return series")
    except AssertionError:
        raise AssertionError("panels without data:\n" + "\n".join(last)) from None

    # Every alert rule is loaded and evaluates without error, and every metric it names is
    # exported: an alert that stays quiet does so because its condition is false.
    rules = {r["name"]: r for r in prom.rules()}
    for alert in (r for g in _rules_file() for r in g):
        rule = rules[alert["alert"]]
        assert rule["health"] == "ok", (alert["alert"], rule.get("lastError"))
        for name in set(_NAME.findall(alert["expr"])):
            assert prom.query(f"count({{__name__={name!r}}})".replace("'", '"')), f"{alert['alert']}: no {name}"


def _rules_file() -> list[list[dict]]:
    import yaml

    return [g["rules"] for g in yaml.safe_load(prometheus.RULES.read_text())["groups"]]
