"""After Postgres is restored from a backup, a person's retry of an item from before the restore,
or an unverified send from before it resolved as not delivered, is not sent before the gateway
is asked whether its key was delivered: between the backup and the restore it may have been
retried, or resolved, and sent, and the ledger entry of that send went with the rest. It starts
in doubt, its key reserved, as ``pacer after-restore`` leaves what it cannot vouch for; the
reconciler's verifier confirms it if the gateway has the key and lets it be sent if not. Items
changed since the restore, and every item of a database never restored, go on as before."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from pacer_common.cli import main
from pacer_common.db.commands import pending_commands
from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.events import ItemEvent
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, Hushed, RetryPolicy
from pacer_common.domain.status import ItemStatus as S
from pacer_common.gateway import GatewayClient, make_client
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.domain.projection import count_deltas
from pacer_reconciler.ports import Position
from pacer_reconciler.verifier import Verifier
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.core import Executor
from tests.integration.control_support import control_api, move, rows
from tests.integration.helpers import one, run, seed_job

TTL = timedelta(seconds=30)
DEADLINE = timedelta(seconds=300)  # PACER_RECONCILER_VERIFY_DEADLINE_S
SENDER = "pacer-sender-test:1:000000000000"


def _after_restore(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pacer after-restore`, as the runbook runs it once the database is restored."""
    monkeypatch.setenv("PACER_DATABASE_URL", url)
    with pytest.raises(SystemExit) as ended:
        main(["after-restore", "--services-stopped", "--requests-lost", "--reason", "restored from last night's backup"])
    assert int(ended.value.code or 0) == 0


def _status(url: str, *items: str) -> list[str]:
    found = {r["item_id"]: r["status"] for r in rows(
        url, "SELECT item_id::text, status::text FROM items WHERE item_id = ANY(%s::uuid[])", list(items))}
    return [found[i] for i in items]


def _ledger(url: str, item: str) -> list[str]:
    return [r["state"] for r in rows(url, "SELECT state FROM send_ledger WHERE item_id = %s", item)]


def _events(url: str, item: str) -> list[tuple[str, str, str]]:
    return [(r["type"], r["from_status"], r["to_status"]) for r in rows(
        url, "SELECT type, from_status::text, to_status::text FROM item_events WHERE item_id = %s ORDER BY version",
        item)]


def _key(url: str, item: str) -> str:
    return str(one(url, "SELECT idem_key FROM items WHERE item_id = %s", item))


def _unverified(url: str, items: list[str]) -> None:
    """Sends in doubt for good: submitted, no answer, the verifier's deadline passed; keys reserved."""
    with psycopg.connect(url) as conn:
        for src, dst, typ in (("pending", "claimed", "ItemClaimed"), ("claimed", "submitted", "ItemSubmitted"),
                              ("submitted", "recovery_pending", "ItemInDoubt"),
                              ("recovery_pending", "unverified", "ItemUnverified")):
            conn.execute("SELECT pacer_transition(%s::uuid[], ARRAY[%s]::item_status[], %s::item_status, %s,"
                         " p_clear_lease => true)", (items, src, dst, typ))
        conn.execute("INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state) SELECT idem_key, item_id,"
                     " guid, to_id, 'reserved' FROM items WHERE item_id = ANY(%s::uuid[])", (items,))


def _sent_between_backup_and_restore(gateway_url: str, url: str, item: str) -> None:
    """What a send made after the backup left behind: the gateway has the key; the restored
    database knows nothing of it."""
    r = rows(url, "SELECT guid, to_id, idem_key FROM items WHERE item_id = %s", item)[0]

    async def go() -> None:
        http = make_client(gateway_url, 5.0)
        try:
            await GatewayClient(http, DEFAULT_CODE_TABLE).send_text(r["guid"], r["to_id"], "hi", r["idem_key"])
        finally:
            await http.aclose()

    asyncio.run(go())


def _gateway_sends(gateway_url: str, guid: str) -> Counter[str]:
    """How many times the gateway accepted each key of ``guid``."""
    sends = httpx.get(f"{gateway_url}/_admin/sends", params={"guid": guid}).json()["sends"]
    return Counter(s["idempotencyKey"] for s in sends)


class _Lookup:
    """The gateway's lookup as the verifier calls it (one gateway, no tenants)."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client

    async def lookup(self, guid: str, idem_key: str, tenant: str = "default") -> bool | Hushed | None:
        return await self.client.lookup(guid, idem_key)


def _verify(url: str, gateway_url: str, expect: int) -> dict[str, int]:
    """One verification round as the reconciler leader runs it, until its lookups are done;
    what each item moved to."""
    async def go(pool: Any) -> dict[str, int]:
        http = make_client(gateway_url, 5.0)
        try:
            store = PostgresLog(pool, "test-retry-restore", DEADLINE, verify_after=timedelta(0))
            verifier = Verifier(store, _Lookup(GatewayClient(http, DEFAULT_CODE_TABLE)), concurrency=8)
            assert await verifier.start_round() == expect
            lookups = [t for t in asyncio.all_tasks() if t.get_name().startswith("verify:")]
            await asyncio.wait_for(asyncio.gather(*lookups), 30)
            assert not verifier.in_flight and not verifier.errors, verifier.lookups
            return dict(verifier.resolved)
        finally:
            await http.aclose()

    return run(url, go)


def _no_answer_until_the_deadline(url: str, item: str) -> str | None:
    """The gateway never says, and the verifier's deadline passes: unverified again."""
    async def go(pool: Any) -> str | None:
        store = PostgresLog(pool, "test-retry-restore", DEADLINE, verify_after=timedelta(0))
        (due,) = [d for d in await store.in_doubt(100) if d.item_id == item]
        return await store.resolve(due, None, datetime.now(UTC) + DEADLINE)

    return run(url, go)


def _commands(url: str, items: list[str]) -> list[ItemCommand]:
    """The items' commands whatever their status (a stale doorbell reaches a sender all the same)."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        found = conn.execute("SELECT c.* FROM items i CROSS JOIN LATERAL pacer_item_command(i) c"
                             " WHERE i.item_id = ANY(%s::uuid[])", (items,)).fetchall()
    by_id = {str(r["item_id"]): ItemCommand.model_validate(r) for r in found}
    return [by_id[i] for i in items]


def _dispatched(url: str, items: list[str]) -> list[str]:
    """Those of ``items`` the reconciler would publish a command for (pending ones)."""
    async def go(pool: Any) -> list[str]:
        return sorted(c.item_id for c in await pending_commands(pool, items))

    return run(url, go)


def _execute(url: str, gateway_url: str, commands: list[ItemCommand]) -> list[tuple[str, bool]]:
    """A sender holding the commands' guids executes each: (outcome, whether it called the gateway)."""
    async def go(pool: Any) -> list[tuple[str, bool]]:
        http = make_client(gateway_url, 5.0)
        try:
            await PostgresGuidLeases(pool, TTL).acquire(sorted({c.guid for c in commands}), SENDER)
            executor = Executor(PostgresItemRepository(pool, TTL), GatewayClient(http, DEFAULT_CODE_TABLE), SENDER,
                                RetryPolicy(), rng=random.Random(1), send_deadline_s=TTL.total_seconds() / 4)
            done = [await executor.execute(c) for c in commands]
            await PostgresGuidLeases(pool, TTL).release(sorted({c.guid for c in commands}), SENDER)
            return [(d.outcome, d.called_gateway) for d in done]
        finally:
            await http.aclose()

    return run(url, go)


def _count_moves(url: str, items: list[str]) -> dict[tuple[int, S], int]:
    """How the reconciler's projection moves these items' shard counts, folding their events."""
    async def go(pool: Any) -> dict[tuple[int, S], int]:
        read = await PostgresLog(pool, "test-retry-restore-tail", DEADLINE).read(Position("0", 0), 10_000)
        return count_deltas(ev for _, ev in read if isinstance(ev, ItemEvent) and ev.item_id in items)

    return run(url, go)


def test_a_retry_of_an_item_from_before_a_restore_is_verified_before_it_is_sent(
        database_url: str, server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url, guid = database_url, "retry-restore-g"
    job, shards, (delivered, lost, later) = seed_job(url, {guid: 3})
    # The backup: two items failed, nothing sent, their keys free; one scheduled for later.
    move(url, [delivered, lost], "failed", "needs_human")
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE items SET not_before = now() + interval '1 hour' WHERE item_id = %s", (later,))
    # After the backup, an operator retried `delivered` and its retry was delivered: the
    # restore took the retry item and its ledger entry away; the gateway has the key.
    _sent_between_backup_and_restore(server_url, url, delivered)

    _after_restore(url, monkeypatch)
    assert _status(url, delivered, lost, later) == ["failed", "failed", "pending"], "nothing put in doubt"
    # Since the restore, `later` came due and failed: a retry of it is on record from here on.
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE items SET not_before = NULL WHERE item_id = %s", (later,))
    move(url, [later], "failed", "needs_human")
    pending_before = one(url, "SELECT n FROM shard_status_counts WHERE shard_id = %s AND status = 'pending'",
                         shards[guid])

    # The runbook's "make those changes again": the same retry by filter (failed, not retried yet).
    async def retry() -> dict[str, Any]:
        async with control_api(url) as api:
            r = await api.post(f"/jobs/{job}/retry", "operator",
                               json={"filter": {"status": "failed"}, "reason": "made again after the restore"})
            assert r.status_code == 200, r.text
            return dict(r.json())

    out = asyncio.run(retry())
    assert out["totals"]["created"] == 3
    new = {x["item_id"]: x["new_item"] for x in out["results"]}
    said = {x["item_id"]: x["message"] for x in out["results"]}
    again_delivered, again_lost, again_later = new[delivered], new[lost], new[later]
    assert "in doubt: the database was restored from a backup" in said[delivered]
    assert _key(url, delivered) in said[delivered], "names the key the gateway is asked about"
    assert "in doubt" not in said[later], "changed since the restore: retried as ever"

    doubted = [again_delivered, again_lost]
    assert _status(url, *doubted, again_later) == ["recovery_pending", "recovery_pending", "pending"]
    assert [_ledger(url, i) for i in doubted] == [["reserved"], ["reserved"]], "each key held until the lookup says"
    assert _ledger(url, again_later) == []
    assert _events(url, again_delivered) == [("ItemCompensationCreated", "pending", "pending"),
                                             ("ItemInDoubt", "pending", "recovery_pending")]
    payload = rows(url, "SELECT payload FROM item_events WHERE item_id = %s AND type = 'ItemInDoubt'",
                   again_delivered)[0]["payload"]
    assert (payload["restored"], payload["compensates"], payload["source"], payload["error_class"], sorted(payload)) == (
        True, delivered, "compensated", "in_doubt", ["actor", "compensates", "error", "error_class", "restored", "source"])
    # The shard's counts: each retry adds one pending (pacer_compensate); the reconciler's fold
    # of the events moves the two in doubt on to recovery_pending.
    sid = shards[guid]
    assert one(url, "SELECT n FROM shard_status_counts WHERE shard_id = %s AND status = 'pending'", sid) \
        == pending_before + 3
    assert _count_moves(url, doubted) == {(sid, S.PENDING): -2, (sid, S.RECOVERY_PENDING): 2}
    assert _count_moves(url, [again_later]) == {}

    # Not sent before the lookup: no command goes out for them, and one that reaches a sender
    # all the same finds nothing to claim.
    assert _dispatched(url, [*doubted, again_later]) == [again_later]
    assert _execute(url, server_url, _commands(url, doubted)) == [("not_pending", False)] * 2
    assert _gateway_sends(server_url, guid) == {_key(url, delivered): 1}, "nothing sent"

    assert _verify(url, server_url, expect=2) == {"confirmed": 1, "pending": 1}
    assert _status(url, *doubted) == ["confirmed", "pending"], "the gateway has the first key, not the second"
    assert _ledger(url, again_delivered) == ["sent"] and _ledger(url, again_lost) == []
    assert _dispatched(url, doubted) == [again_lost]
    assert _execute(url, server_url, _commands(url, [*doubted, again_later])) == [
        ("not_pending", False), ("confirmed", True), ("confirmed", True)]
    assert _gateway_sends(server_url, guid) == {_key(url, i): 1 for i in (delivered, lost, later)}, "each key once"


def test_an_unverified_send_from_before_a_restore_resolved_as_not_delivered_is_verified_before_it_is_sent(
        database_url: str, server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url, guid = database_url, "resolve-restore-g"
    _, _, items = seed_job(url, {guid: 3})
    delivered, lost, unknown = items
    _unverified(url, items)
    # After the backup, `delivered` was resolved as not delivered and sent again; the restore
    # shows it unverified, its key reserved, and knows nothing of that.
    _sent_between_backup_and_restore(server_url, url, delivered)
    _after_restore(url, monkeypatch)
    assert _status(url, *items) == ["unverified"] * 3

    async def resolve(item: str) -> dict[str, Any]:
        async with control_api(url, token_prefix=f"{uuid.uuid4().hex}-") as api:  # a session of its own
            r = await api.post(f"/items/{item}/resolve", "tech_admin",
                               json={"delivered": False, "reason": "made again after the restore"})
            assert r.status_code == 200, r.text
            return dict(r.json())

    answers = [asyncio.run(resolve(i)) for i in items]
    assert [a["status"] for a in answers] == ["recovery_pending"] * 3
    assert "restored from a backup after it last changed" in answers[0]["message"]
    assert [_ledger(url, i) for i in items] == [["reserved"]] * 3, "each key kept until the lookup says"
    assert _events(url, delivered)[-2:] == [("ItemResolvedNotDelivered", "unverified", "pending"),
                                            ("ItemInDoubt", "pending", "recovery_pending")]
    assert _dispatched(url, items) == []
    assert _execute(url, server_url, _commands(url, items)) == [("not_pending", False)] * 3

    # The gateway cannot say of `unknown`: unverified again, since the restore. Resolved again
    # then, it is sent as any resolution sends it: the lookup was made after the restore.
    assert _no_answer_until_the_deadline(url, unknown) == "unverified"
    assert _verify(url, server_url, expect=2) == {"confirmed": 1, "pending": 1}
    assert _status(url, delivered, lost) == ["confirmed", "pending"]
    assert asyncio.run(resolve(unknown))["status"] == "pending"
    assert _ledger(url, delivered) == ["sent"] and _ledger(url, lost) == [] and _ledger(url, unknown) == []
    assert _execute(url, server_url, _commands(url, items)) == [
        ("not_pending", False), ("confirmed", True), ("confirmed", True)]
    assert _gateway_sends(server_url, guid) == {_key(url, i): 1 for i in items}, "each key once"


def test_in_a_database_never_restored_a_retry_and_a_resolution_are_pending_at_once(database_url: str) -> None:
    url = database_url
    _, _, (failed, unverified) = seed_job(url, {"never-restored-g": 2})
    move(url, [failed], "failed", "needs_human")
    _unverified(url, [unverified])

    outcome, retry, message = one(url, "SELECT outcome, new_item::text, message FROM pacer_retry_item(%s, 'op')", failed)
    assert (outcome, message) == ("created", f"compensation {retry} queued for item {failed}")
    assert _status(url, retry) == ["pending"] and _ledger(url, retry) == []
    assert _events(url, retry) == [("ItemCompensationCreated", "pending", "pending")]
    assert _dispatched(url, [retry]) == [retry]

    assert one(url, "SELECT status FROM pacer_resolve_unverified(%s, false, 'op', 'not in the chat')",
               unverified) == "pending"
    assert _ledger(url, unverified) == []
    assert _events(url, unverified)[-1] == ("ItemResolvedNotDelivered", "unverified", "pending")
    assert one(url, "SELECT count(*) FROM item_events WHERE type = 'ItemInDoubt' AND payload ? 'restored'") == 0


def test_a_bulk_retry_after_a_restore_takes_no_lock_per_item(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each compensation in doubt has its key reserved without a lock of its own: a bulk retry
    # (up to 10,000 items in one transaction) would hold one per item to its commit, out of the
    # shared lock table every session's locks come from.
    url = database_url
    _, _, failed = seed_job(url, {"bulk-g1": 3, "bulk-g2": 3})
    move(url, failed, "failed", "needs_human")
    _after_restore(url, monkeypatch)
    with psycopg.connect(url) as conn:  # one transaction, as the Control API runs it
        made = conn.execute("SELECT outcome, new_item::text FROM pacer_retry_items(%s::uuid[], 'op')",
                            (failed,)).fetchall()
        advisory = conn.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"
                                " AND locktype = 'advisory'").fetchone()
    assert [o for o, _ in made] == ["created"] * 6
    assert advisory == (1,)  # the partitions' writer lock (pacer_partition_writer), one per transaction
    new = [n for _, n in made]
    assert _status(url, *new) == ["recovery_pending"] * 6
    assert [_ledger(url, n) for n in new] == [["reserved"]] * 6
