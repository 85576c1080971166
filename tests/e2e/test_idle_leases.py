"""A sender gives back the guid leases of guids with no work (``PACER_SENDER_IDLE_LEASE_S``),
so it renews only the leases of busy guids; new work takes them again, and the guids' pacing
carries on across the spell: no send sooner than the interval after the last."""

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

GUIDS = 5
INTERVAL_S = 6.0
# A short lease, so the renewal round that gives an idle lease back comes every 2 s. The send
# deadline and the gateway timeout are each a quarter of it: 1.5 s, not less, as beside the
# suite's other stacks a slower call would leave its item in doubt, and this stack runs no
# reconciler to settle it.
LEASE_TTL_S = 6.0


def test_idle_guids_give_their_leases_back_and_take_them_again_with_their_pacing(
        infra_env: Infra, tmp_path: Path) -> None:
    with stack_on(infra_env, tmp_path, f"t{uuid.uuid4().hex[:10]}", {
        "PACER_SENDER_IDLE_LEASE_S": "1", "PACER_SENDER_LEASE_TTL_S": str(LEASE_TTL_S),
        "PACER_SENDER_GATEWAY_TIMEOUT_S": str(LEASE_TTL_S / 4),
        "PACER_SENDER_MIN_INTERVAL_MS": str(int(INTERVAL_S * 1000)), "PACER_SENDER_JITTER_MS": "0",
        "PACER_SENDER_FIRST_SEND_SPREAD": "0",
    }) as st:
        st.start_gateway(wait=False, min_interval_ms=int(INTERVAL_S * 1000) - 100)
        st.start_services("planner", "sender")
        first = request(GUIDS, GUIDS)
        rid = str(first["request_id"])
        publish(st, json.dumps(first).encode(), key=rid.encode())
        wait_for(lambda: len(sends_for(st, rid)) == GUIDS, 60, "every guid's first send")
        epochs = _leases(st, rid)
        assert len(epochs) == GUIDS and all(owner for owner, _ in epochs.values()), epochs

        # No more work: within the idle time and a renewal round (1 + 2 s), every lease is back.
        wait_for(lambda: all(owner is None for owner, _ in _leases(st, rid).values()), 30, "the idle guids' leases given back")
        assert st.metric("sender", "pacer_sender_guid_leases_held") == 0.0

        second = campaign_again(st, rid, GUIDS)
        wait_for(lambda: (s := job_state(st, second)) and s[1] == {"confirmed": GUIDS}, 60, "every guid's second send",
                 describe=lambda: {"job": job_state(st, second), "leases": _leases(st, rid),
                                   "sends": len(sends_for(st, rid)),
                                   **{m: st.metric("sender", f"pacer_sender_{m}") for m in (
                                       "active_guids", "guid_leases_held", "buffered_items")}})
        again = _leases(st, rid)
        assert all(owner is not None and epoch == epochs[g][1] + 1 for g, (owner, epoch) in again.items()), (
            epochs, again)  # taken again by the same sender, nobody between
        sends = sends_for(st, rid)
        assert len(sends) == 2 * GUIDS and len({s["idempotencyKey"] for s in sends}) == 2 * GUIDS
        by_guid: dict[str, list[float]] = {}
        for s in sends:
            by_guid.setdefault(s["guid"], []).append(s["at"])
        gaps = [max(at) - min(at) for at in by_guid.values()]
        assert min(gaps) >= INTERVAL_S - 0.2, f"a guid sent again sooner than its interval: {gaps}"
        assert gateway(st, "/_admin/stats")["interval_violations"] == 0


def _leases(st: Stack, prefix: str) -> dict[str, tuple[str | None, int]]:
    """guid → (owner, epoch) of the campaign's guid leases."""
    with psycopg.connect(st.infra.database_url) as conn:
        rows = conn.execute("SELECT guid, owner, epoch FROM guid_leases WHERE guid LIKE %s", (f"{prefix}-%",)).fetchall()
    return {guid: (owner, epoch) for guid, owner, epoch in rows}
