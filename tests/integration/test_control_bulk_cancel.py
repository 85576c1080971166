"""A bulk cancel ("Cancel matching", POST /jobs/{job_id}/cancel-items) on a real Postgres: one
statement for all its items, no subtransaction per item, and every item cancelled exactly as a
cancel of it alone cancels it."""

from __future__ import annotations

import asyncio
from typing import Any

from pacer_common.db import operations
from pacer_common.db.pool import open_pool
from pacer_control.adapters.postgres import PostgresControl
from tests.integration.control_support import audit, control_api, move, rows
from tests.integration.helpers import one, seed_job

N = 60


def next_xid(url: str) -> int:
    """The next transaction id the server will assign (a subtransaction that writes takes one
    too), read without taking one."""
    return int(one(url, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"))


def item_rows(url: str, ids: list[str]) -> list[dict[str, Any]]:
    return [rows(url, "SELECT status::text, last_error_class, last_error, lease_owner, lease_until, version"
                      " FROM items WHERE item_id = %s", i)[0] for i in ids]


def events(url: str, ids: list[str]) -> list[list[tuple[Any, ...]]]:
    return [[(e["type"], e["from_status"], e["to_status"], e["payload"]) for e in rows(
        url, "SELECT type, from_status::text, to_status::text, payload FROM item_events WHERE item_id = %s"
             " ORDER BY version", i)] for i in ids]


def test_a_bulk_cancel_is_one_statement_with_no_subtransaction_per_item(database_url: str) -> None:
    url = database_url
    job, _, items = seed_job(url, {"g1": N // 2, "g2": N // 2})
    _, _, (alone,) = seed_job(url, {"g1": 1})

    async def go() -> tuple[dict[str, Any], int]:
        async with control_api(url) as api:
            await api.get(f"/jobs/{job}", "operator")  # the token's first use is behind it (it writes)
            before = next_xid(url)
            r = await api.post(f"/jobs/{job}/cancel-items", "operator", json={"reason": "withdrawn"})
            used = next_xid(url) - before
            assert r.status_code == 200, r.text
            one_item = await api.post(f"/items/{alone}/cancel", "operator")
            assert one_item.status_code == 200 and one_item.json()["outcome"] == "done", one_item.text
            return r.json(), used

    answer, used = asyncio.run(go())
    # One transaction: a savepoint per item that writes takes a transaction id each (N + 1).
    assert used <= 2, f"{used} transaction ids for a cancel of {N} items"
    assert answer["totals"] == {"cancelled": N, "too_late": 0, "already_final": 0, "not_found": 0}
    assert answer["more"] is False
    # Each item as the single cancel leaves its own.
    (want,) = item_rows(url, [alone])
    (want_events,) = events(url, [alone])
    for row, evs in zip(item_rows(url, items), events(url, items), strict=True):
        assert (row, evs) == (want, want_events)
    (entry,) = [a for a in audit(url, job) if a["action"] == "cancel_items"]
    assert (entry["reason"], entry["before"], entry["after"]) == (
        "withdrawn", {"filter": {"guid": None}, "matched": N},
        {"cancelled": N, "too_late": 0, "already_final": 0, "not_found": 0})


def test_a_bulk_cancel_answers_each_item_as_its_own_cancel_would(database_url: str) -> None:
    """Twin items in every state a cancel meets, one of each cancelled alone (the single
    cancel's call), the other of each by the bulk statement: the same outcomes and messages,
    the same rows and events after."""
    url = database_url
    states = ["pending", "waiting_retry", "claimed", "confirmed", "expired"]
    twins: list[list[str]] = []
    for _ in range(2):
        _, _, made = seed_job(url, {"g1": len(states)})
        for item, state in zip(made, states, strict=True):
            if state != "pending":
                move(url, [item], state, "gateway_error" if state == "waiting_retry" else None)
        twins.append(made)
    missing = "01a00000-0000-7000-8000-000000000000"
    alone, together = [*twins[0], missing], [*twins[1], missing]

    async def go() -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
        pool = await open_pool(url, min_size=1, max_size=2, name="test-bulk-cancel")
        try:
            singly: list[tuple[str, str]] = []
            async with pool.connection() as conn:
                for item in alone:
                    r = await operations.cancel_item(conn, item, "ops")
                    singly.append((r.outcome, r.message))
            bulk = await PostgresControl(pool).atomically(lambda tx: tx.cancel_items(together, "ops"))
            return singly, bulk
        finally:
            await pool.close()

    singly, bulk = asyncio.run(go())
    assert [b[0] for b in bulk] == together, "in the order given"
    assert [o for o, _ in singly] == ["cancelled", "cancelled", "too_late", "already_final", "already_final",
                                      "not_found"]
    for (a, (outcome, message)), (b, bulk_outcome, bulk_message) in zip(zip(alone, singly, strict=True), bulk,
                                                                         strict=True):
        assert (bulk_outcome, bulk_message.replace(b, "<id>")) == (outcome, message.replace(a, "<id>"))
    def after(ids: list[str]) -> list[dict[str, Any]]:  # a claimed twin's lease ends when its own does
        return [{**r, "lease_until": r["lease_until"] is not None} for r in item_rows(url, ids)]

    assert after(twins[1]) == after(twins[0])
    assert events(url, twins[1]) == events(url, twins[0])
