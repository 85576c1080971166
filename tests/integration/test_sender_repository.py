"""The sender's database steps: begin (claim + key + submitted), confirm, settle."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta
from datetime import time as dtime
from zoneinfo import ZoneInfo

import psycopg

from pacer_common.db.pool import Pool, open_pool
from pacer_common.domain.receipts import Receipt
from pacer_common.domain.status import ItemStatus as S
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.domain.decisions import Decision
from pacer_sender.ports import Begun, GuidLease
from tests.integration.helpers import cmd, eventually, seed_job, status_and_events, wait_for


async def _repo(url: str, owner: str = "w1", guids: tuple[str, ...] = ("g1",)) -> tuple[Pool, PostgresItemRepository]:
    """A repository whose sender ``owner`` already holds the leases of ``guids``."""
    pool = await open_pool(url, min_size=1, max_size=8)
    await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(list(guids), owner)
    return pool, PostgresItemRepository(pool, timedelta(seconds=30))


def test_begin_send_claims_reserves_and_submits_in_one_step(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> tuple[Begun, bool]:
        pool, repo = await _repo(database_url)
        begun = await repo.begin_send(cmd(item, "k1"), "w1")
        assert begun.epoch is not None
        ok = await repo.confirm(cmd(item, "k1"), begun.epoch, Receipt(0, "ok", "m-1", 1.0))
        await pool.close()
        return begun, ok

    begun, ok = asyncio.run(scenario())
    assert begun.outcome == "submitted" and begun.epoch == 1 and begun.attempts == 0
    assert ok
    assert status_and_events(database_url, item) == ("confirmed", ["ItemClaimed", "ItemSubmitted", "ItemConfirmed"])
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT state FROM send_ledger WHERE idem_key = 'k1'").fetchone() == ("sent",)


def test_a_begin_hands_the_sender_what_is_left_of_a_quiet_on_its_guid_s_row(database_url: str) -> None:
    """A reconciler's lookup was answered with Retry-After: 120 and left the quiet on g1's
    lease row. The sender's next claim of a g1 item learns it; g2's claim has none."""
    _, _, items = seed_job(database_url, {"g1": 1, "g2": 1})

    async def scenario() -> tuple[Begun, Begun]:
        pool, repo = await _repo(database_url, guids=("g1", "g2"))
        with psycopg.connect(database_url) as conn:
            conn.execute("UPDATE guid_leases SET gateway_quiet_until = now() + interval '120 seconds'"
                         " WHERE guid = 'g1'")
            rows = conn.execute("SELECT guid, item_id::text, idem_key FROM items WHERE item_id = ANY(%s)",
                                (items,)).fetchall()
        by_guid = {guid: cmd(item, key, guid) for guid, item, key in rows}  # their own keys: the set-based path
        quiet, free = await asyncio.gather(repo.begin_send(by_guid["g1"], "w1"), repo.begin_send(by_guid["g2"], "w1"))
        await pool.close()
        return quiet, free

    quiet, free = asyncio.run(scenario())
    assert quiet.outcome == "submitted" and quiet.quiet_s is not None and 110 < quiet.quiet_s <= 120, quiet
    assert free.outcome == "submitted" and free.quiet_s is None, free


def test_concurrent_begins_for_one_item_submit_it_once(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> list[str]:
        pool, repo = await _repo(database_url)
        results = await asyncio.gather(*(repo.begin_send(cmd(item, "k1"), "w1") for i in range(8)))
        await pool.close()
        return sorted(r.outcome for r in results)

    assert asyncio.run(scenario()) == ["not_pending"] * 7 + ["submitted"]


def test_second_item_with_a_taken_key_is_abandoned_unsent(database_url: str) -> None:
    _, _, (first, second) = seed_job(database_url, {"g1": 2})

    async def scenario() -> Begun:
        pool, repo = await _repo(database_url)
        await repo.begin_send(cmd(first, "same"), "w1")
        dup = await repo.begin_send(cmd(second, "same"), "w1")
        await pool.close()
        return dup

    dup = asyncio.run(scenario())
    assert dup.outcome == "duplicate" and dup.holder == first
    assert status_and_events(database_url, second) == ("abandoned", ["ItemClaimed", "ItemDuplicateIntercepted"])


def test_settle_with_a_stale_epoch_records_nothing_and_keeps_the_key(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})
    retry = Decision(S.WAITING_RETRY, "ItemRetryScheduled", "retryable", "busy", release_ledger=True)

    async def scenario() -> tuple[bool, bool]:
        pool, repo = await _repo(database_url)
        begun = await repo.begin_send(cmd(item, "k1"), "w1")
        assert begun.epoch is not None
        stale = await repo.settle(cmd(item, "k1"), begun.epoch - 1, retry)
        fresh = await repo.settle(cmd(item, "k1"), begun.epoch, retry)
        await pool.close()
        return stale, fresh

    assert asyncio.run(scenario()) == (False, True)
    assert status_and_events(database_url, item)[0] == "waiting_retry"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM send_ledger").fetchone() == (0,), "not sent: key released"


def test_a_rate_limit_and_its_quiet_are_written_in_one_transaction_and_a_stale_settle_writes_neither(
        database_url: str) -> None:
    """The settle of a 429 with ``Retry-After``: the item waits to retry and the guid's lease row
    keeps the quiet, committed together (a sender killed after it leaves both, or neither). A
    settle with a stale epoch writes no quiet either; a later quiet on the row is never shortened."""
    _, _, (item,) = seed_job(database_url, {"g1": 1})
    limited = Decision(S.WAITING_RETRY, "ItemRetryScheduled", "rate_limited", "HTTP 429", release_ledger=True)

    def quiet_left() -> float | None:
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT extract(epoch FROM gateway_quiet_until - now())::float8 FROM guid_leases"
                               " WHERE guid = 'g1'").fetchone()
        return None if row is None else row[0]

    async def scenario() -> tuple[bool, float | None, bool]:
        pool, repo = await _repo(database_url)
        begun = await repo.begin_send(cmd(item, "k1"), "w1")
        assert begun.epoch is not None
        stale = await repo.settle(cmd(item, "k1"), begun.epoch - 1, limited, quiet_until=time.monotonic() + 30)
        after_stale = quiet_left()
        fresh = await repo.settle(cmd(item, "k1"), begun.epoch, limited, quiet_until=time.monotonic() + 30)
        await pool.close()
        return stale, after_stale, fresh

    stale, after_stale, fresh = asyncio.run(scenario())
    assert (stale, after_stale, fresh) == (False, None, True)
    assert status_and_events(database_url, item)[0] == "waiting_retry"
    left = quiet_left()
    assert left is not None and 28 < left <= 30, left
    with psycopg.connect(database_url) as conn:  # a quiet that ends later stays as it is
        conn.execute("UPDATE guid_leases SET gateway_quiet_until = now() + interval '1 hour' WHERE guid = 'g1'")
    _, _, (second,) = seed_job(database_url, {"g1": 1})

    async def again() -> None:
        pool, repo = await _repo(database_url)
        begun = await repo.begin_send(cmd(second, "k2"), "w1")
        assert begun.epoch is not None and await repo.settle(cmd(second, "k2"), begun.epoch, limited, quiet_until=time.monotonic() + 5)
        await pool.close()

    asyncio.run(again())
    left = quiet_left()
    assert left is not None and left > 3500, left


def test_a_sender_without_the_guid_lease_writes_nothing(database_url: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> tuple[str, list]:
        pool, repo = await _repo(database_url, owner="w1")
        leases = PostgresGuidLeases(pool, timedelta(seconds=30))
        refused = await leases.acquire(["g1"], "w2")  # w1's lease is live
        begun = await repo.begin_send(cmd(item, "k1"), "w2")
        await pool.close()
        return begun.outcome, refused

    outcome, refused = asyncio.run(scenario())
    assert (outcome, refused) == ("guid_lost", [])
    assert status_and_events(database_url, item) == ("pending", [])


def test_the_first_lease_of_a_guid_never_seen_is_returned_at_once(database_url: str) -> None:
    async def scenario() -> list:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        try:
            return await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["new-guid", "other"], "w1")
        finally:
            await pool.close()

    leases = asyncio.run(scenario())
    assert sorted(lease.guid for lease in leases) == ["new-guid", "other"]
    assert all(lease.windows == {} and lease.last_send_at is None for lease in leases)


def test_an_expired_guid_lease_is_taken_over_with_its_last_send_time(database_url: str) -> None:
    _, _, (item, item2) = seed_job(database_url, {"g1": 2})

    async def scenario() -> tuple[GuidLease, GuidLease, datetime]:
        pool = await open_pool(database_url, min_size=1, max_size=2)
        short = PostgresGuidLeases(pool, timedelta(0))
        await short.acquire(["g1"], "w1")
        repo = PostgresItemRepository(pool, timedelta(seconds=30))
        await short.acquire(["g1"], "w1")  # renewing an expired lease of our own still works
        (lease,) = await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["g1"], "w1")
        await repo.begin_send(cmd(item, "k1"), "w1")
        async with pool.connection() as conn:
            first = (await (await conn.execute("SELECT last_send_at FROM guid_leases")).fetchone())["last_send_at"]
        await repo.begin_send(cmd(item2, "k2"), "w1")
        async with pool.connection() as conn:
            await conn.execute("UPDATE guid_leases SET lease_until = now() - interval '1 second'")
        (taken,) = await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["g1"], "w2")
        await pool.close()
        return lease, taken, first

    lease, taken, first = asyncio.run(scenario())
    assert taken.took_over and taken.epoch == lease.epoch + 1
    assert taken.last_send_at is not None, "the previous owner's send time carries over for pacing"
    # and so do its window counts: both sends in the last one's minute, hour and day (its
    # own alone in a window that began between them)
    windows = {"minute": lambda t: t.timestamp() // 60, "hour": lambda t: t.timestamp() // 3600,
               "day": lambda t: t.astimezone(ZoneInfo("Asia/Shanghai")).date()}
    assert {name: n for name, (n, _) in taken.windows.items()} == {
        name: 1 + (of(first) == of(taken.last_send_at)) for name, of in windows.items()}
    # the day is the guid's (Asia/Shanghai by default): it ends at the next midnight there
    local = taken.last_send_at.astimezone(ZoneInfo("Asia/Shanghai"))
    midnight = datetime.combine(local.date() + timedelta(days=1), dtime(0), ZoneInfo("Asia/Shanghai"))
    assert taken.windows["day"][1] == midnight.timestamp()
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT owner, takeovers FROM guid_leases").fetchone() == ("w2", 1)


def test_a_successor_paces_from_the_gateways_answer_not_from_the_sends_start(database_url: str) -> None:
    """The gateway sees a send between its start and its answer: a new owner that counted the
    interval from the start could send again sooner than the interval after the gateway saw it."""
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> tuple[GuidLease, datetime | None, datetime | None]:
        pool, repo = await _repo(database_url)
        begun = await repo.begin_send(cmd(item, "k1"), "w1")
        assert begun.epoch is not None
        await asyncio.sleep(0.3)  # the request on the wire: the gateway answers later
        await repo.confirm(cmd(item, "k1"), begun.epoch, Receipt(0, "ok", "m-1", 1.0))
        async with pool.connection() as conn:
            row = await (await conn.execute(
                "SELECT last_send_at, last_answer_at FROM guid_leases WHERE guid = 'g1'")).fetchone()
            started, answered = row["last_send_at"], row["last_answer_at"]
            await conn.execute("UPDATE guid_leases SET lease_until = now() - interval '1 second'")
        (taken,) = await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["g1"], "w2")
        await pool.close()
        return taken, started, answered

    taken, started, answered = asyncio.run(scenario())
    assert answered is not None and started is not None and answered > started
    assert taken.took_over and taken.last_send_at == answered


def test_a_successor_paces_an_unanswered_send_from_the_latest_it_could_have_reached_the_gateway(
        database_url: str) -> None:
    """An owner that stopped (or whose confirmation was cancelled) between the claim and the
    answer leaves no answer time: the send may have reached the gateway at any time up to the
    in-flight bound after its claim, so a successor paces from there, not from the claim."""
    _, _, (first, second) = seed_job(database_url, {"g1": 2})
    in_flight = timedelta(seconds=7)

    async def scenario() -> tuple[GuidLease, datetime, datetime]:
        pool, repo = await _repo(database_url)
        begun = await repo.begin_send(cmd(first, "k1"), "w1")
        assert begun.epoch is not None
        await repo.confirm(cmd(first, "k1"), begun.epoch, Receipt(0, "ok", "m-1", 1.0))
        assert (await repo.begin_send(cmd(second, "k2"), "w1")).epoch is not None  # never answered
        async with pool.connection() as conn:
            row = await (await conn.execute(
                "SELECT last_send_at, last_answer_at FROM guid_leases WHERE guid = 'g1'")).fetchone()
            await conn.execute("UPDATE guid_leases SET lease_until = now() - interval '1 second'")
        (taken,) = await PostgresGuidLeases(pool, timedelta(seconds=30), in_flight).acquire(["g1"], "w2")
        await pool.close()
        return taken, row["last_send_at"], row["last_answer_at"]

    taken, started, answered = asyncio.run(scenario())
    assert answered < started, "the earlier send's answer is older than the unanswered send's claim"
    assert taken.took_over and taken.last_send_at == started + in_flight


def test_a_confirm_batch_takes_guid_leases_in_guid_order_so_a_renewal_never_deadlocks_with_it(
        database_url: str) -> None:
    """A renewal locks guid leases in guid order; a confirm batch whose items' ids sort the other
    way must wait for it, not take the later guid first and deadlock."""
    _, _, (a, b) = seed_job(database_url, {"g1": 1, "g2": 1})
    item_a, item_b = "ffffffff-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
    with psycopg.connect(database_url) as conn:  # g1's item sorts after g2's
        conn.execute("UPDATE items SET item_id = %s, idem_key = 'ka' WHERE item_id = %s", (item_a, a))
        conn.execute("UPDATE items SET item_id = %s, idem_key = 'kb' WHERE item_id = %s", (item_b, b))

    async def begin() -> tuple[int, int]:
        pool, repo = await _repo(database_url, guids=("g1", "g2"))
        ea = (await repo.begin_send(cmd(item_a, "ka", "g1"), "w1")).epoch
        eb = (await repo.begin_send(cmd(item_b, "kb", "g2"), "w1")).epoch
        await pool.close()
        assert ea is not None and eb is not None
        return ea, eb

    ea, eb = asyncio.run(begin())
    renewal = psycopg.connect(database_url)
    renewal.execute("UPDATE guid_leases SET lease_until = lease_until WHERE guid = 'g1'")  # as a renewal: g1 first
    confirmer = psycopg.connect(database_url, autocommit=True)
    pid = confirmer.info.backend_pid
    moved: list[tuple[int, bool]] = []
    thread = threading.Thread(target=lambda: moved.extend(confirmer.execute(
        "SELECT ord, moved FROM pacer_confirm_many(%s::uuid[], %s::bigint[], %s::text[], %s::jsonb[])",
        ([item_b, item_a], [eb, ea], ["kb", "ka"], ['{"code": 0}', '{"code": 0}'])).fetchall()))
    thread.start()
    with psycopg.connect(database_url, autocommit=True) as watch:  # the batch now waits for g1
        wait_for(lambda: watch.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                       (pid,)).fetchone() == ("Lock",), what="the confirm batch to wait for g1's lease")
    renewal.execute("UPDATE guid_leases SET lease_until = lease_until WHERE guid = 'g2'")  # then g2: free
    renewal.commit()
    thread.join(timeout=30)
    renewal.close()
    confirmer.close()
    assert sorted(moved) == [(1, True), (2, True)]


def test_a_confirmation_with_time_to_spare_waits_for_another_and_they_go_as_one_statement(database_url: str) -> None:
    """A confirmation whose guid sends nothing sooner waits, within ``spare_linger_s``, for
    other guids' confirmations; one with no time to spare goes at the step's own linger and
    takes the waiting one with it."""
    _, _, (a, b) = seed_job(database_url, {"g1": 1, "g2": 1})

    async def scenario() -> tuple[list[bool], int]:
        pool = await open_pool(database_url, min_size=1, max_size=8)
        await PostgresGuidLeases(pool, timedelta(seconds=30)).acquire(["g1", "g2"], "w1")
        repo = PostgresItemRepository(pool, timedelta(seconds=30), linger_s=0.0, spare_linger_s=600.0)
        try:
            ca, cb = cmd(a, "ka"), cmd(b, "kb")
            ea, eb = (await repo.begin_send(ca, "w1")).epoch, (await repo.begin_send(cb, "w1")).epoch
            assert ea is not None and eb is not None
            spare = asyncio.ensure_future(repo.confirm(ca, ea, Receipt(0, "ok", "m-a", 1.0), spare_s=600.0))

            async def waiting() -> bool:  # queued, its batch due only when its spare runs out
                return any(due - time.monotonic() > 60 for _, _, due in repo._confirms._pending)

            await eventually(waiting, 10, "the confirmation with time to spare waiting in its batch")
            both = await asyncio.wait_for(asyncio.gather(
                spare, repo.confirm(cb, eb, Receipt(0, "ok", "m-b", 1.0))), 30)
            async with pool.connection() as conn:
                calls = await (await conn.execute(
                    "SELECT count(DISTINCT xmin::text) FROM items WHERE item_id = ANY(%s)", ([a, b],))).fetchone()
            return list(both), calls["count"]
        finally:
            await pool.close()

    both, transactions = asyncio.run(scenario())
    assert both == [True, True]
    assert transactions == 1, "the two confirmations went in different statements"
    assert status_and_events(database_url, a)[0] == status_and_events(database_url, b)[0] == "confirmed"


def test_a_delivered_send_whose_answer_holds_a_nul_or_a_lone_surrogate_is_confirmed(database_url: str) -> None:
    """Postgres' jsonb refuses ``\\u0000`` and a lone surrogate's escape: stored as the gateway
    gave it, such a ``msg`` made the confirmation of a delivered send fail."""
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> bool:
        pool, repo = await _repo(database_url)
        try:
            begun = await repo.begin_send(cmd(item, "k1"), "w1")
            assert begun.epoch is not None
            return await repo.confirm(cmd(item, "k1"), begun.epoch, Receipt(0, "ok\x00 \ud800", "m-\x00", 1.0))
        finally:
            await pool.close()

    assert asyncio.run(scenario())
    assert status_and_events(database_url, item)[0] == "confirmed"
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT receipt FROM send_ledger WHERE idem_key = 'k1'").fetchone()
    assert row is not None and row[0]["msg"] == "ok \ufffd" and row[0]["msg_id"] == "m-"
