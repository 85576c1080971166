"""A lookup answers for the in-doubt episode it was made for: once the item has moved on (sent
again, in doubt again), an old answer changes nothing, whoever applies it (a second task of one
verifier, the old owner of a segment)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pacer_common.db.pool import open_pool
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.verifier import QUIET_HOLD, Verifier
from tests.integration.helpers import eventually, seed_job


def _state(url: str, item: str) -> tuple[str, datetime, list[str]]:
    """The item's status, its updated_at and the states of its ledger rows."""
    with psycopg.connect(url) as conn:
        status, since = conn.execute("SELECT status::text, updated_at FROM items WHERE item_id = %s",
                                     (item,)).fetchone() or ("", datetime.min)
        ledger = [r[0] for r in conn.execute("SELECT state FROM send_ledger WHERE item_id = %s ORDER BY state",
                                             (item,))]
    return status, since, ledger


def _events(url: str, item: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM item_events WHERE item_id = %s", (item,)).fetchone()
    return int(row[0]) if row else 0


def _send_again_and_fail(url: str, item: str) -> None:
    """What a sender does with an item the verifier made pending: reserve its key, claim,
    submit, and meet a 5xx: in doubt again. Each step its own transaction (its own now())."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pacer_transition(%s::uuid[], '{pending}', 'claimed', 'ItemClaimed')", ([item],))
        conn.execute("INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)"
                     " SELECT idem_key, item_id, guid, to_id, 'reserved' FROM items WHERE item_id = %s", (item,))
        conn.execute("SELECT pacer_transition(%s::uuid[], '{claimed}', 'submitted', 'ItemSubmitted')", ([item],))
        conn.execute("SELECT pacer_transition(%s::uuid[], '{submitted}', 'recovery_pending', 'ItemInDoubt')",
                     ([item],))


def _in_doubt(url: str) -> str:
    """One item in doubt, its key reserved."""
    _, _, (item,) = seed_job(url, {"episode-g": 1}, status="recovery_pending")
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)"
                     " SELECT idem_key, item_id, guid, to_id, 'reserved' FROM items WHERE item_id = %s", (item,))
    return item


async def _store(url: str, deadline: timedelta = timedelta(seconds=300)) -> tuple[Any, PostgresLog]:
    pool = await open_pool(url, min_size=1, max_size=4)
    return pool, PostgresLog(pool, "test-episodes", deadline, verify_after=timedelta(0))


@pytest.mark.parametrize(("found", "deadline"), [(False, timedelta(seconds=300)), (True, timedelta(seconds=300)),
                                                 (None, timedelta(0))],
                         ids=["not-found", "found", "deadline"])
def test_an_answer_for_an_older_episode_changes_nothing(database_url: str, found: bool | None,
                                                        deadline: timedelta) -> None:
    url = database_url
    item = _in_doubt(url)

    async def scenario() -> None:
        pool, store = await _store(url, deadline)
        try:
            (stale,) = await store.in_doubt(10)  # the round that started a lookup (T2, or the old owner)
            assert stale.item_id == item
            (first,) = await store.in_doubt(10)  # T1: the same episode, proved not sent
            assert await store.resolve(first, False, datetime.now(UTC)) == "pending"
            assert _state(url, item)[0::2] == ("pending", []), "T1 released the key"
            _send_again_and_fail(url, item)
            status, since, ledger = _state(url, item)
            assert (status, ledger) == ("recovery_pending", ["reserved"]) and since != stale.since
            before = _events(url, item)

            assert await store.resolve(stale, found, datetime.now(UTC)) is None, "the old episode's answer"
            assert _state(url, item) == (status, since, ["reserved"]), "status, episode and reserved key unchanged"
            assert _events(url, item) == before

            # The current episode is still decided by its own lookup.
            (current,) = await store.in_doubt(10)
            assert current.since == since
            assert await store.resolve(current, False, datetime.now(UTC)) == "pending"
            assert _state(url, item)[0::2] == ("pending", [])
        finally:
            await pool.close()

    asyncio.run(scenario())


class _HeldLookup:
    """Answers "not found", but only when let go: a lookup made before the gateway recorded a send."""

    def __init__(self) -> None:
        self.asked = 0
        self.go = asyncio.Event()

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | None:
        self.asked += 1
        await self.go.wait()
        return False


def test_a_lookup_still_running_when_its_item_is_sent_again_does_not_release_the_new_send(
        database_url: str) -> None:
    """The old owner of a segment (or a second task of one verifier) finishes a lookup after
    the item was verified elsewhere, sent again and put in doubt again."""
    url = database_url
    item = _in_doubt(url)

    async def scenario() -> None:
        pool, store = await _store(url)
        lookup = _HeldLookup()
        verifier = Verifier(store, lookup, concurrency=2, timeout_s=60)
        try:
            assert await verifier.start_round() == 1

            async def asked() -> bool:
                return lookup.asked == 1

            await eventually(asked, 10, "the old lookup under way")
            (fresh,) = await store.in_doubt(10)  # the new owner verifies the same episode first
            assert await store.resolve(fresh, False, datetime.now(UTC)) == "pending"
            _send_again_and_fail(url, item)
            status, since, _ = _state(url, item)
            assert status == "recovery_pending"

            lookup.go.set()

            async def finished() -> bool:
                return verifier.in_flight == 0

            await eventually(finished, 10, "the old lookup resolved")
            assert not verifier.errors and not verifier.resolved, verifier.resolved
            assert _state(url, item) == ("recovery_pending", since, ["reserved"]), "the new send's key stays held"
        finally:
            await verifier.close()
            await pool.close()

    asyncio.run(scenario())


class _Answering:
    """A gateway that says it never saw the send; keeps the guids it was asked about."""

    def __init__(self) -> None:
        self.guids: list[str] = []

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | None:
        self.guids.append(guid)
        return False


def test_an_item_of_a_guid_keeping_its_gateway_s_quiet_is_not_looked_up_until_the_quiet_ends(
        database_url: str) -> None:
    """The sender a 429 answered wrote ``Retry-After``'s quiet to the guid's lease row: the
    verifier's read leaves the guid's in-doubt item out (another guid's, newer, is read and
    looked up), asks the gateway nothing of that guid until the quiet is over, then asks."""
    url = database_url
    item = _in_doubt(url)
    _, _, (other,) = seed_job(url, {"other-g": 1}, status="recovery_pending")
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO guid_leases (guid, gateway_quiet_until) VALUES ('episode-g', now() + interval '1 hour')"
                     " ON CONFLICT (guid) DO UPDATE SET gateway_quiet_until = EXCLUDED.gateway_quiet_until")
        conn.execute("UPDATE items SET updated_at = updated_at - interval '1 minute' WHERE item_id = %s", (item,))
        conn.execute("INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)"
                     " SELECT idem_key, item_id, guid, to_id, 'reserved' FROM items WHERE item_id = %s", (other,))

    async def scenario() -> None:
        pool, store = await _store(url)
        lookup = _Answering()
        verifier = Verifier(store, lookup, concurrency=2, timeout_s=60)
        try:
            assert [i.item_id for i in await store.in_doubt(1)] == [other], "the quiet guid's older item is left out"

            async def settled() -> bool:
                return verifier.in_flight == 0

            assert await verifier.start_round() == 1
            await eventually(settled, 10, "the round's item settled")
            assert lookup.guids == ["other-g"]
            assert _state(url, item)[0] == "recovery_pending", "no answer: still in doubt"
            with psycopg.connect(url) as conn:
                conn.execute("UPDATE guid_leases SET gateway_quiet_until = now() - interval '1 second'"
                             " WHERE guid = 'episode-g'")
            assert await verifier.start_round() == 1
            await eventually(settled, 10, "the round's item settled")
            assert lookup.guids == ["other-g", "episode-g"] and _state(url, item)[0] == "pending", (
                "asked once the quiet was over")
        finally:
            await verifier.close()
            await pool.close()

    asyncio.run(scenario())


def test_an_item_in_doubt_longer_than_the_longest_quiet_is_decided_without_a_lookup(database_url: str) -> None:
    """A guid the gateway keeps limiting: its item, in doubt for over an hour (QUIET_HOLD), is
    read again and made unverified at its deadline, without a call of the quiet guid."""
    url = database_url
    item = _in_doubt(url)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO guid_leases (guid, gateway_quiet_until) VALUES ('episode-g', now() + interval '1 hour')"
                     " ON CONFLICT (guid) DO UPDATE SET gateway_quiet_until = EXCLUDED.gateway_quiet_until")
        conn.execute("UPDATE items SET updated_at = now() - %s - interval '1 minute' WHERE item_id = %s",
                     (QUIET_HOLD, item))

    async def scenario() -> None:
        pool, store = await _store(url)
        lookup = _Answering()
        verifier = Verifier(store, lookup, concurrency=2, timeout_s=60)
        try:
            assert await verifier.start_round() == 1

            async def settled() -> bool:
                return verifier.in_flight == 0

            await eventually(settled, 10, "the round's item settled")
            assert lookup.guids == [] and verifier.lookups["quiet"] == 1
            assert _state(url, item)[0] == "unverified"
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT last_error FROM items WHERE item_id = %s", (item,)).fetchone()
            assert row is not None and "quiet (Retry-After)" in row[0], row
        finally:
            await verifier.close()
            await pool.close()

    asyncio.run(scenario())


def test_a_quiet_a_lookup_was_asked_for_reaches_the_guid_s_lease_row_and_never_shortens_one(
        database_url: str) -> None:
    """The reconciler's write of a lookup's quiet: a guid with no lease row gets one; a later
    end replaces an earlier one, an earlier one leaves a later one as it is."""
    url = database_url

    def left(guid: str) -> float:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT extract(epoch FROM gateway_quiet_until - now())::float8 FROM guid_leases"
                               " WHERE guid = %s", (guid,)).fetchone()
        assert row is not None and row[0] is not None, f"no quiet on {guid}'s row"
        return float(row[0])

    async def scenario() -> tuple[float, float, float]:
        pool, store = await _store(url)
        try:
            await store.keep_quiet("hushed-g", 30.0)
            first = left("hushed-g")
            await store.keep_quiet("hushed-g", 600.0)
            longer = left("hushed-g")
            await store.keep_quiet("hushed-g", 5.0)
            return first, longer, left("hushed-g")
        finally:
            await pool.close()

    first, longer, kept = asyncio.run(scenario())
    assert 25 < first <= 30 and 595 < longer <= 600 and 590 < kept <= 600, (first, longer, kept)
