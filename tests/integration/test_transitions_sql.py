"""The guarded transition statement: only table-allowed, correctly fenced changes are written."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import psycopg
import pytest

from pacer_common.db.transitions import Transition, apply
from pacer_common.domain.status import IllegalTransition
from pacer_common.domain.status import ItemStatus as S

CLAIM = Transition("ItemClaimed", S.CLAIMED, frozenset({S.PENDING}), lease_owner="w1", lease_ttl=timedelta(seconds=30))


def seed_item(url: str, status: str = "pending") -> str:
    item_id = str(uuid.uuid4())
    job_id = str(uuid.uuid4())
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind, status)"
            " VALUES (%s, %s, 1, 'g1', 'r1', 'hi', %s, 3, 'campaign', %s)",
            (item_id, job_id, f"k-{item_id}", status),
        )
    return item_id


async def run(url: str, t: Transition, ids: list[str]) -> list:
    async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction():
        return await apply(conn, t, ids)


def events(url: str, item_id: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT version, type, from_status::text, to_status::text FROM item_events WHERE item_id = %s ORDER BY version",
            (item_id,),
        ).fetchall()


def test_claim_moves_pending_item_bumps_epoch_and_appends_event(database_url: str) -> None:
    item = seed_item(database_url)
    moved = asyncio.run(run(database_url, CLAIM, [item]))
    assert [(m.item_id, m.version, m.lease_epoch, m.from_status) for m in moved] == [(item, 1, 1, S.PENDING)]
    assert events(database_url, item) == [(1, "ItemClaimed", "pending", "claimed")]


def test_transition_from_unexpected_status_changes_nothing(database_url: str) -> None:
    item = seed_item(database_url, "confirmed")
    assert asyncio.run(run(database_url, CLAIM, [item])) == []
    assert events(database_url, item) == []


def test_stale_epoch_is_refused(database_url: str) -> None:
    item = seed_item(database_url)
    (claimed,) = asyncio.run(run(database_url, CLAIM, [item]))
    submit_stale = Transition("ItemSubmitted", S.SUBMITTED, frozenset({S.CLAIMED}), epoch=claimed.lease_epoch - 1)
    assert asyncio.run(run(database_url, submit_stale, [item])) == []
    submit = Transition("ItemSubmitted", S.SUBMITTED, frozenset({S.CLAIMED}), epoch=claimed.lease_epoch)
    assert len(asyncio.run(run(database_url, submit, [item]))) == 1


def test_transition_not_in_table_cannot_even_be_built() -> None:
    with pytest.raises(IllegalTransition):
        Transition("ItemRequeued", S.PENDING, frozenset({S.SUBMITTED}))


def test_concurrent_claims_have_exactly_one_winner(database_url: str) -> None:
    item = seed_item(database_url)

    async def race() -> list[list]:
        return await asyncio.gather(*(run(database_url, CLAIM, [item]) for _ in range(8)))

    results = asyncio.run(race())
    assert sum(len(r) for r in results) == 1
    assert len(events(database_url, item)) == 1


def test_takeover_only_moves_expired_leases(database_url: str) -> None:
    live, dead = seed_item(database_url), seed_item(database_url)
    short = Transition("ItemClaimed", S.CLAIMED, frozenset({S.PENDING}), lease_owner="w", lease_ttl=timedelta(0))
    asyncio.run(run(database_url, CLAIM, [live]))
    asyncio.run(run(database_url, short, [dead]))
    takeover = Transition("ItemLeaseExpired", S.PENDING, frozenset({S.CLAIMED}), only_expired=True, clear_lease=True)
    moved = asyncio.run(run(database_url, takeover, [live, dead]))
    assert [m.item_id for m in moved] == [dead]


def test_database_transition_table_mirrors_the_domain_table(database_url: str) -> None:
    from pacer_common.domain.status import TRANSITIONS

    with psycopg.connect(database_url) as conn:
        rows = set(conn.execute("SELECT from_status::text, to_status::text FROM item_transitions").fetchall())
    assert rows == {(s.value, t.value) for s, targets in TRANSITIONS.items() for t in targets}


def test_database_refuses_a_transition_the_table_does_not_allow(database_url: str) -> None:
    item = seed_item(database_url, "submitted")
    with psycopg.connect(database_url) as conn, pytest.raises(psycopg.errors.CheckViolation, match="illegal"):
        conn.execute("SELECT * FROM pacer_transition(ARRAY[%s]::uuid[], '{submitted}', 'pending', 'X')", (item,))


def test_two_moves_in_one_are_each_checked_against_the_table(database_url: str) -> None:
    """pending → claimed is allowed, claimed → confirmed is not: the pair is refused whole."""
    item = seed_item(database_url, "pending")
    with psycopg.connect(database_url) as conn, pytest.raises(psycopg.errors.CheckViolation,
                                                              match=r"pending.*claimed -> confirmed"):
        conn.execute("SELECT * FROM pacer_transition(ARRAY[%s]::uuid[], '{pending}', 'confirmed', 'X',"
                     " p_via => 'claimed', p_via_type => 'Y')", (item,))
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT status::text, version FROM items WHERE item_id = %s", (item,)).fetchone() == (
            "pending", 0)
