"""A sender that takes many rested guids at once (here: at its start) spreads their first
campaign sends over one batch interval instead of sending them all in the same instant; so
does a campaign that starts later on those guids, once they are rested again."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
import pytest

from pacer_dev.infra import Infra
from pacer_dev.stack import Stack
from tests.conftest import stack_on
from tests.e2e.conftest import gateway
from tests.e2e.helpers import campaign_again, job_state, publish, request, sends_for
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.e2e

INTERVAL_S = 2.0
GUIDS = 60


def test_a_starting_sender_spreads_the_first_sends_of_its_rested_guids_over_one_interval(
        infra_env: Infra, tmp_path: Path) -> None:
    with stack_on(infra_env, tmp_path, f"t{uuid.uuid4().hex[:10]}", {
        "PACER_SENDER_MIN_INTERVAL_MS": str(int(INTERVAL_S * 1000)), "PACER_SENDER_JITTER_MS": "0",
        "PACER_SENDER_ONLINE_RESERVE": "0",  # PACER_SENDER_FIRST_SEND_SPREAD at its default
    }) as st:
        st.start_gateway(wait=False, min_interval_ms=int(INTERVAL_S * 1000) - 50)
        st.start_services("planner")
        req = request(GUIDS, GUIDS)  # one item on each of 60 guids that never sent
        rid = str(req["request_id"])
        publish(st, json.dumps(req).encode(), key=rid.encode())
        wait_for(lambda: (s := job_state(st, rid)) and sum(s[1].values()) == GUIDS, 60, "the job planned")
        st.start_service("sender", "sender-1")  # takes every guid's lease at once
        sends = wait_for(lambda: len(s := sends_for(st, rid)) == GUIDS and s, 60, "every guid's first send")
        _assert_spread(sorted(s["at"] for s in sends), "first sends")

        # A second campaign on the same guids, which the sender still holds, once every one of
        # them is rested again: its lease row's last send began an interval or more ago.
        wait_for(lambda: _rested(st, rid) == GUIDS, 30, "the guids rested")
        campaign_again(st, rid, GUIDS)
        again = wait_for(lambda: len(s := [x for x in sends_for(st, rid) if x["toId"].startswith("again-")]) == GUIDS
                         and s, 60, "every guid's send of the second campaign")
        _assert_spread(sorted(s["at"] for s in again), "the second campaign's sends")
        assert gateway(st, "/_admin/stats")["interval_violations"] == 0


def _rested(st: Stack, rid: str) -> int:
    """The campaign's guids whose last send (its claim, on the lease row) began at least one
    interval ago by the database's clock."""
    with psycopg.connect(st.infra.database_url) as conn:
        row = conn.execute("SELECT count(*) FROM guid_leases WHERE guid LIKE %s AND last_send_at"
                           " <= clock_timestamp() - make_interval(secs => %s)", (f"{rid}-g%", INTERVAL_S)).fetchone()
    return row[0] if row else 0


def _assert_spread(at: list[float], what: str) -> None:
    """The gateway's times of the guids' sends: without the spread all 60 go within a fraction
    of a second of each other; with it, each waits a uniform part of the 2 s interval, so they
    span most of it. That part is drawn when the work reaches the guid, on the sender's own
    clock, which no row records: no bound on how late a send comes follows from the
    configuration between recorded times, and none is asserted."""
    assert at[-1] - at[0] >= 0.5 * INTERVAL_S, f"{what} spread over only {at[-1] - at[0]:.2f} s"
