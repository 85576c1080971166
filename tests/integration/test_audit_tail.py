"""The audit log's tail on the real database: an entry whose transaction commits after a later
entry's is still read, once, in its turn; a position from another cluster's transactions is
refused; entries restored from one are put first."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from pacer_common.db.migrate import ForeignEventLog, migrate, settle_restored_audit
from tests.integration.control_support import Api, control_api
from tests.integration.helpers import eventually


def write(conn: psycopg.Connection[Any], target: str, action: str) -> None:
    conn.execute("SELECT pacer_audit('test', %s, 'tail', %s, NULL, NULL, NULL)", (action, target))


async def tail(api: Api, target: str, after: str, at_least: int = 0) -> tuple[list[str], str]:
    """The tail's page after ``after`` once it holds ``at_least`` entries: a transaction open
    elsewhere on the server holds the tail back while it lasts."""
    async def page() -> tuple[list[str], str] | None:
        r = await api.get(f"/audit?target_type=tail&target_id={target}&after={after}", "operator")
        assert r.status_code == 200, r.text
        body = r.json()
        actions = [e["action"] for e in body["entries"]]
        return (actions, body["next_after"]) if len(actions) >= at_least else None

    return await eventually(page, what=f"{at_least} audit entries after {after}")


def test_an_entry_committed_after_a_later_one_is_read_in_its_turn(database_url: str) -> None:
    target = f"t-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with control_api(database_url) as api:
            with psycopg.connect(database_url) as early, psycopg.connect(database_url) as late, \
                    psycopg.connect(database_url, autocommit=True) as other:
                early.execute("SELECT pg_current_xact_id()")  # its transaction began first
                write(late, target, "late-id-first")  # takes the smaller id, commits last
                write(early, target, "early")
                early.commit()
                write(other, target, "after-both")
                seen, pos = await tail(api, target, "0", at_least=1)
                assert seen == ["early"], "read past an entry whose transaction is still open"
                late.commit()
                more, pos = await tail(api, target, pos, at_least=2)
                assert more == ["late-id-first", "after-both"]
                newest = (await api.get(f"/audit?target_type=tail&target_id={target}", "operator")).json()
                by_id = [e["action"] for e in newest["entries"]]
                assert by_id == ["after-both", "early", "late-id-first"], "the listing stays newest id first"
                assert await tail(api, target, pos) == ([], pos), "nothing new: the same position"

    asyncio.run(go())


def test_a_tail_started_from_an_id_or_the_listing_passes_no_entry_of_a_transaction_still_open(
        database_url: str) -> None:
    target = f"t-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with control_api(database_url) as api:
            with psycopg.connect(database_url) as open_, psycopg.connect(database_url, autocommit=True) as conn:
                open_.execute("SELECT pg_current_xact_id()")  # began before the others, writes last
                write(conn, target, "a")
                write(conn, target, "b")
                listing = (await api.get(f"/audit?target_type=tail&target_id={target}", "operator")).json()
                newest = listing["entries"][0]
                assert newest["action"] == "b" and newest["position"].endswith(".0"), \
                    "while an older transaction runs, the listing's position is that transaction's"
                assert await tail(api, target, str(newest["id"])) == ([], str(newest["id"]))
                write(open_, target, "late")  # a larger id than b's, a smaller xid
                open_.commit()
            from_id = (await tail(api, target, str(newest["id"]), at_least=3))[0]
            from_listing = (await tail(api, target, newest["position"], at_least=3))[0]
            # in transactions' order: the late one first; what the listing showed may come again
            assert from_id == from_listing == ["late", "a", "b"], (from_id, from_listing)

    asyncio.run(go())


def test_a_plain_id_starts_at_that_entry_and_a_position_ahead_of_the_database_is_refused(database_url: str) -> None:
    target = f"t-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with control_api(database_url) as api:
            with psycopg.connect(database_url, autocommit=True) as conn:
                for action in ("a", "b", "c"):
                    write(conn, target, action)
            newest = (await api.get(f"/audit?target_type=tail&target_id={target}", "operator")).json()["entries"]
            assert [e["action"] for e in newest] == ["c", "b", "a"]
            assert (await tail(api, target, str(newest[2]["id"]), at_least=2))[0] == ["b", "c"]
            b = newest[1]
            own = b["position"].endswith(f".{b['id']}")  # else an older transaction was open: it starts there
            want = ["c"] if own else ["b", "c"]
            assert (await tail(api, target, b["position"], at_least=len(want)))[0] == want
            r = await api.get(f"/audit?after=99999999999999.{newest[0]['id']}", "operator")
            assert r.status_code == 422 and "ahead of this database" in r.text, r.text
            for bad in ("1.", ".1", "x", "1.2.3", "-1"):
                assert (await api.get(f"/audit?after={bad}", "operator")).status_code == 422, bad

    asyncio.run(go())


def test_entries_restored_from_another_cluster_are_put_before_the_ones_written_here(database_url: str) -> None:
    target = f"t-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        write(conn, target, "restored")
        conn.execute("UPDATE audit_log SET xid = '99999999999999' WHERE target_id = %s", (target,))
        write(conn, target, "here")
        settle_restored_audit(conn)
        rows = conn.execute("SELECT action, xid::text FROM audit_log WHERE target_id = %s ORDER BY xid, id",
                            (target,)).fetchall()
    assert rows == [("restored", "0"), ("here", "0")], "all of them another cluster's: ids' order"


def test_migrate_refuses_an_event_log_restored_from_another_cluster_and_says_why(database_url: str) -> None:
    """A logical backup restored into another cluster: the reconcilers' cursors carry
    transaction ids this cluster has not reached, and its tails would pass over every event
    written from now on. migrate refuses, naming the way out; a database that only ever ran
    here migrates as ever."""
    migrate(database_url)  # nothing foreign: goes through
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO log_cursors (name, last_xid, last_seq) VALUES ('reconciler/0of1', '99999999999999', 7)"
                     " ON CONFLICT (name) DO UPDATE SET last_xid = EXCLUDED.last_xid")
    with pytest.raises(ForeignEventLog, match=r"logical backup .* physical backup"):
        migrate(database_url)
