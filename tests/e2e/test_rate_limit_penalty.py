"""A sender killed a moment after the gateway rate-limited a guid leaves the guid's penalty, and
the quiet the gateway asked for, on its lease row: both were written at once, not with the next
renewal, so the next owner goes on at the slower pace, after the quiet, instead of meeting the
gateway's limit afresh."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from pacer_dev.infra import Infra
from pacer_dev.stack import Stack
from tests.conftest import stack_on
from tests.e2e.conftest import gateway
from tests.e2e.helpers import job_state, publish, request
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.e2e

# A long lease: the first renewal, which would also write the penalty, comes a third of it
# (40 s) after the sender starts.
LEASE_TTL_S = 120.0


def test_a_sender_killed_right_after_a_rate_limit_leaves_the_penalty_on_the_guid_s_lease_row(
        infra_env: Infra, tmp_path: Path) -> None:
    with stack_on(infra_env, tmp_path, f"t{uuid.uuid4().hex[:10]}", {
        "PACER_SENDER_LEASE_TTL_S": str(LEASE_TTL_S), "PACER_SENDER_MIN_INTERVAL_MS": "150",
        "PACER_SENDER_JITTER_MS": "0", "PACER_SENDER_FIRST_SEND_SPREAD": "0",
    }) as st:
        st.start_gateway(wait=False, min_interval_ms=1500)  # the gateway's own limit: 10× Pacer's pace
        st.start_services("planner")
        req = request(20, 1)
        rid = str(req["request_id"])
        guid = f"{rid}-g0"
        publish(st, json.dumps(req).encode(), key=rid.encode())
        wait_for(lambda: (s := job_state(st, rid)) and sum(s[1].values()) == 20, 60, "the job planned")
        started = time.monotonic()
        st.start_service("sender", "sender-1")
        owner, penalty = wait_for(lambda: _penalized(st, guid), LEASE_TTL_S, "the guid's penalty on its lease row")
        written_after = time.monotonic() - started
        assert written_after < LEASE_TTL_S / 3, (
            f"the penalty reached the row {written_after:.1f} s after the sender started: with a renewal, not at once")
        assert penalty > 1

        st.kill("sender-1")  # kill -9: no renewal, no release
        kept = _penalized(st, guid)
        assert kept is not None and kept[0] == owner, "nobody released the lease"
        assert kept[1] >= penalty, f"the penalty the next owner will read: {kept[1]} (written {penalty})"


def _penalized(st: Stack, guid: str) -> tuple[str, float] | None:
    """The guid's lease holder and penalty, once it has both."""
    with psycopg.connect(st.infra.database_url) as conn:
        row = conn.execute("SELECT owner, penalty FROM guid_leases WHERE guid = %s", (guid,)).fetchone()
    return None if row is None or row[0] is None or row[1] is None else (str(row[0]), float(row[1]))


def test_a_quiet_the_gateway_asked_for_holds_the_guid_under_the_sender_that_takes_it_over(
        infra_env: Infra, tmp_path: Path) -> None:
    """The gateway allows guid A one send in 100 s and answers the next with HTTP 429 and
    ``Retry-After: 300``. The sender that was answered is killed; another takes both guids over
    once their leases run out. While it sends guid B's items, it calls A not once: a call inside
    the quiet would be counted in the gateway's ``quiet_violations`` (and refused again)."""
    ttl_s = 4.0
    with stack_on(infra_env, tmp_path, f"t{uuid.uuid4().hex[:10]}", {
        "PACER_SENDER_LEASE_TTL_S": str(ttl_s), "PACER_SENDER_GATEWAY_TIMEOUT_S": "1",
        "PACER_SENDER_MIN_INTERVAL_MS": "150",
        "PACER_SENDER_JITTER_MS": "0", "PACER_SENDER_FIRST_SEND_SPREAD": "0",
    }) as st:
        req = request(240, 2)
        rid = str(req["request_id"])
        hushed, busy = f"{rid}-g0", f"{rid}-g1"
        st.start_gateway(wait=False, guid_min_interval_ms={hushed: 100_000}, retry_after_s=300)
        st.start_services("planner")
        publish(st, json.dumps(req).encode(), key=rid.encode())
        wait_for(lambda: (s := job_state(st, rid)) and sum(s[1].values()) == 240, 60, "the job planned")
        st.start_service("sender", "sender-1")
        wait_for(lambda: _quiet_left(st, hushed), 60, "the gateway's quiet on the guid's lease row")
        st.kill("sender-1")  # kill -9: no release; the quiet on the row is all the next owner learns
        assert gateway(st, "/_admin/stats")["quiet_asked"] == 1
        before = gateway(st, f"/_admin/sends?guid={busy}&limit=0")["total"]
        st.start_service("sender", "sender-2")

        def taken_over_and_sending() -> bool:
            with psycopg.connect(st.infra.database_url) as conn:
                owners: dict[str, str | None] = dict(conn.execute(
                    "SELECT guid, owner FROM guid_leases WHERE guid = ANY(%s)", ([hushed, busy],)).fetchall())
            sent = gateway(st, f"/_admin/sends?guid={busy}&limit=0")["total"]
            return all(str(o).startswith("sender-2") for o in owners.values()) and sent >= before + 15

        wait_for(taken_over_and_sending, 90, "sender-2 holding both guids and sending guid B")
        stats = gateway(st, "/_admin/stats")
        assert stats["quiet_violations"] == 0, f"guid A was called inside the quiet its 429 asked for: {stats}"
        assert gateway(st, f"/_admin/sends?guid={hushed}&limit=0")["total"] == 1
        left = _quiet_left(st, hushed)
        assert left is not None and 200 < left <= 300, f"the quiet kept on the row: {left} s left"


def _quiet_left(st: Stack, guid: str) -> float | None:
    """Seconds left of the quiet on the guid's lease row, while there is one."""
    with psycopg.connect(st.infra.database_url) as conn:
        row = conn.execute("SELECT extract(epoch FROM gateway_quiet_until - now())::float8 FROM guid_leases"
                           " WHERE guid = %s", (guid,)).fetchone()
    return None if row is None or row[0] is None or row[0] <= 0 else float(row[0])
