"""Operator actions on items: manual retry as a compensation item, cancel, and the lock view."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest

from pacer_common import cli
from pacer_common.db.operations import cancel_item, lock_view, retry_item
from tests.integration.control_support import control_server, rows
from tests.integration.helpers import eventually, seed_job, waiting_for_locks

ACTOR = "ops:alice"

# pacer_transition steps to walk a freshly seeded (pending) item to a status.
_STEP = {
    "claimed": ("pending", "ItemClaimed"),
    "submitted": ("claimed", "ItemSubmitted"),
    "confirmed": ("submitted", "ItemConfirmed"),
    "failed": ("submitted", "ItemFailed"),
    "waiting_retry": ("submitted", "ItemRetryScheduled"),
    "recovery_pending": ("submitted", "ItemInDoubt"),
    "unverified": ("recovery_pending", "ItemUnverified"),
    "abandoned": ("pending", "ItemDuplicateIntercepted"),
    "expired": ("pending", "ItemExpired"),
}


def move(url: str, item: str, status: str) -> None:
    """Walk ``item`` from pending to ``status`` through the guarded transition function."""
    path: list[str] = []
    s = status
    while s != "pending":
        path.append(s)
        s = _STEP[s][0]
    with psycopg.connect(url) as conn:
        for to in reversed(path):
            src, typ = _STEP[to]
            owner = "w1" if to == "claimed" else None
            moved = conn.execute(
                "SELECT * FROM pacer_transition(ARRAY[%s]::uuid[], ARRAY[%s]::item_status[], %s::item_status, %s,"
                " p_lease_owner => %s, p_lease_ttl => interval '30 seconds')",
                (item, src, to, typ, owner),
            ).fetchall()
            assert len(moved) == 1, f"could not move {item} {src} -> {to}"


def one(url: str, sql: str, *args: Any) -> Any:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, args).fetchone()
    return row[0] if row is not None and len(row) == 1 else row


def events(url: str, item: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT version, type, from_status::text, to_status::text, payload FROM item_events"
            " WHERE item_id = %s ORDER BY version", (item,)).fetchall()


async def _retry(url: str, item: str, priority: int | None = None) -> Any:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await retry_item(conn, item, ACTOR, priority)


async def _cancel(url: str, item: str) -> Any:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await cancel_item(conn, item, ACTOR)


def begin_send(url: str, item: str) -> str:
    """The sender's first step for ``item`` (guid lease, claim, key reservation, submitted)."""
    with psycopg.connect(url) as conn:
        guid, key, to_id = conn.execute("SELECT guid, idem_key, to_id FROM items WHERE item_id = %s",
                                        (item,)).fetchone()
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY[%s], 'w1', interval '30 seconds')", (guid,))
        (outcome,) = conn.execute("SELECT outcome FROM pacer_begin_send(%s, 'w1', interval '30 seconds', %s, %s, %s)",
                                  (item, key, guid, to_id)).fetchone()
    return outcome


# ---- manual retry -------------------------------------------------------------------------


def test_retry_of_a_failed_item_creates_one_pending_compensation(database_url: str) -> None:
    job, shards, (orig,) = seed_job(database_url, {"g1": 1})
    assert begin_send(database_url, orig) == "submitted"
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT pacer_settle(%s, 1, %s, 'failed', 'ItemFailed', 'bad_params', 'no', NULL, true)",
                     (orig, f"k-{orig}"))
    pending_before = one(database_url, "SELECT n FROM shard_status_counts WHERE shard_id = %s AND status = 'pending'",
                         shards["g1"])

    r = asyncio.run(_retry(database_url, orig, priority=1))

    assert (r.outcome, r.ok) == ("created", True) and r.new_item
    comp = r.new_item
    row = one(database_url,
              "SELECT c.status::text, c.version, c.compensates::text, c.priority, c.job_id = o.job_id,"
              " c.shard_id = o.shard_id, c.guid = o.guid, c.to_id = o.to_id, c.content = o.content,"
              " c.idem_key = o.idem_key, c.kind = o.kind, c.attempts"
              " FROM items c, items o WHERE c.item_id = %s AND o.item_id = %s", comp, orig)
    assert row == ("pending", 0, orig, 1, True, True, True, True, True, True, True, 0)
    assert events(database_url, comp) == [
        (0, "ItemCompensationCreated", "pending", "pending", {"compensates": orig, "actor": ACTOR, "priority": 1})]
    assert one(database_url, "SELECT n FROM shard_status_counts WHERE shard_id = %s AND status = 'pending'",
               shards["g1"]) == pending_before + 1
    assert one(database_url, "SELECT total FROM jobs WHERE job_id = %s", job) == 2
    assert one(database_url, "SELECT total FROM shards WHERE shard_id = %s", shards["g1"]) == 2
    assert one(database_url, "SELECT status::text FROM items WHERE item_id = %s", orig) == "failed"

    # The compensation takes the ordinary path: its key was released by the failure, so it sends.
    assert begin_send(database_url, comp) == "submitted"
    # While it is open, another retry of the original is refused and counted.
    again = asyncio.run(_retry(database_url, orig))
    assert (again.outcome, again.new_item, again.message) == (
        "conflict", comp, "a retry of this item is already in progress")
    assert one(database_url, "SELECT count(*) FROM operator_conflicts WHERE reason = 'retry_in_progress'") == 1


def test_a_retry_in_a_completed_job_reopens_its_shard_and_job_in_its_own_transaction(database_url: str) -> None:
    """The compensation is open from the retry's commit on, so its shard and job are: a job the
    reconciler had completed runs again at once, and a sender claiming the compensation before
    the reconciler has applied it sends it, rather than marking it held "job completed"."""
    job, shards, (orig,) = seed_job(database_url, {"g1": 1})
    move(database_url, orig, "failed")
    with psycopg.connect(database_url) as conn:  # as the reconciler leaves a finished job
        conn.execute("UPDATE shards SET status = 'completed' WHERE shard_id = %s", (shards["g1"],))
        conn.execute("UPDATE jobs SET status = 'completed', started_at = now(), finished_at = now()"
                     " WHERE job_id = %s", (job,))

    r = asyncio.run(_retry(database_url, orig))

    assert r.outcome == "created" and "waiting" not in r.message
    assert one(database_url, "SELECT j.status, j.finished_at IS NULL, s.status FROM jobs j JOIN shards s"
               " USING (job_id) WHERE j.job_id = %s", job) == ("running", True, "running")
    assert begin_send(database_url, r.new_item) == "submitted"


def test_concurrent_retries_of_one_item_create_one_compensation(database_url: str) -> None:
    _, _, (orig,) = seed_job(database_url, {"g1": 1})
    move(database_url, orig, "failed")

    async def race() -> list[Any]:
        conns = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(10)]
        try:
            return await asyncio.gather(*(retry_item(c, orig, f"ops:{i}") for i, c in enumerate(conns)))
        finally:
            for c in conns:
                await c.close()

    results = asyncio.run(race())
    assert sorted(r.outcome for r in results) == ["conflict"] * 9 + ["created"]
    (created,) = [r.new_item for r in results if r.outcome == "created"]
    assert {r.new_item for r in results} == {created}
    assert one(database_url, "SELECT count(*) FROM items WHERE compensates = %s", orig) == 1
    assert one(database_url, "SELECT count(*) FROM operator_conflicts WHERE item_id = %s", orig) == 9


@pytest.mark.parametrize("status", ["claimed", "submitted", "recovery_pending"])
def test_retry_of_an_executing_item_is_a_recorded_conflict(database_url: str, status: str) -> None:
    _, _, (orig,) = seed_job(database_url, {"g1": 1})
    move(database_url, orig, status)

    r = asyncio.run(_retry(database_url, orig))

    assert (r.outcome, r.new_item, r.message) == ("conflict", None, "this item is executing, check back later")
    conflict = one(database_url, "SELECT item_id::text, actor, reason FROM operator_conflicts")
    assert conflict == (orig, ACTOR, "executing")
    assert one(database_url, "SELECT count(*) FROM items") == 1


@pytest.mark.parametrize(("status", "outcome"), [
    ("confirmed", "already_delivered"), ("pending", "already_queued"), ("waiting_retry", "already_queued")])
def test_retry_is_refused_for_delivered_and_queued_items(database_url: str, status: str, outcome: str) -> None:
    _, _, (orig,) = seed_job(database_url, {"g1": 1})
    move(database_url, orig, status)

    r = asyncio.run(_retry(database_url, orig))

    assert (r.outcome, r.new_item, r.ok) == (outcome, None, False)
    assert one(database_url, "SELECT count(*) FROM items") == 1
    assert one(database_url, "SELECT count(*) FROM operator_conflicts") == 0


@pytest.mark.parametrize("status", ["expired", "abandoned"])
def test_retry_of_other_final_items_creates_a_compensation(database_url: str, status: str) -> None:
    _, _, (orig,) = seed_job(database_url, {"g1": 1})
    move(database_url, orig, status)
    assert asyncio.run(_retry(database_url, orig)).outcome == "created"


def test_a_retry_of_an_unverified_send_is_refused_until_it_is_resolved(database_url: str) -> None:
    _, _, (orig,) = seed_job(database_url, {"g1": 1})
    assert begin_send(database_url, orig) == "submitted"  # key reserved; the answer is then lost
    for to, src, typ in [("recovery_pending", "submitted", "ItemInDoubt"),
                         ("unverified", "recovery_pending", "ItemUnverified")]:
        one(database_url, "SELECT count(*) FROM pacer_transition(ARRAY[%s]::uuid[], ARRAY[%s]::item_status[],"
            " %s::item_status, %s)", orig, src, to, typ)

    r = asyncio.run(_retry(database_url, orig))

    # No compensation, which the ledger could only abandon as a duplicate: resolve it instead.
    assert (r.outcome, r.new_item) == ("conflict", None) and "it is resolved instead" in r.message
    assert one(database_url, "SELECT state FROM send_ledger WHERE item_id = %s", orig) == "reserved"


def test_retry_of_an_unknown_item_is_not_found(database_url: str) -> None:
    r = asyncio.run(_retry(database_url, "00000000-0000-0000-0000-000000000001"))
    assert (r.outcome, r.new_item) == ("not_found", None)


# ---- cancel -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["pending", "waiting_retry"])
def test_cancel_of_a_queued_item_abandons_it_with_an_event(database_url: str, status: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})
    move(database_url, item, status)

    r = asyncio.run(_cancel(database_url, item))

    assert (r.outcome, r.ok) == ("cancelled", True)
    assert one(database_url, "SELECT status::text, last_error_class FROM items WHERE item_id = %s",
               item) == ("abandoned", "cancelled")
    last = events(database_url, item)[-1]
    assert last[1:4] == ("ItemCancelled", status, "abandoned")
    assert last[4] == {"actor": ACTOR, "error_class": "cancelled"}
    assert asyncio.run(_cancel(database_url, item)).outcome == "already_final"


@pytest.mark.parametrize(("status", "outcome"), [
    ("claimed", "too_late"), ("submitted", "too_late"), ("recovery_pending", "too_late"),
    ("confirmed", "already_final"), ("failed", "already_final"), ("expired", "already_final")])
def test_cancel_of_a_taken_or_final_item_changes_nothing(database_url: str, status: str, outcome: str) -> None:
    _, _, (item,) = seed_job(database_url, {"g1": 1})
    move(database_url, item, status)
    before = events(database_url, item)

    r = asyncio.run(_cancel(database_url, item))

    assert r.outcome == outcome
    if outcome == "too_late":
        assert r.message == "cancel takes effect at item boundaries; this item is in flight"
    assert one(database_url, "SELECT status::text FROM items WHERE item_id = %s", item) == status
    assert events(database_url, item) == before


_CLAIM = ("SELECT * FROM pacer_transition(ARRAY[%s]::uuid[], '{pending}', 'claimed', 'ItemClaimed',"
          " p_lease_owner => 'w1', p_lease_ttl => interval '30 seconds')")


def test_cancel_racing_a_claim_has_exactly_one_winner(database_url: str) -> None:
    _, _, items = seed_job(database_url, {"g1": 60})

    async def race() -> list[tuple[bool, str]]:
        claimer = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        canceller = await psycopg.AsyncConnection.connect(database_url, autocommit=True)

        async def claim(item: str) -> bool:
            cur = await claimer.execute(_CLAIM, (item,))
            return len(await cur.fetchall()) == 1

        try:
            out: list[tuple[bool, str]] = []
            for k, item in enumerate(items):
                # Alternate who is sent first, so each side wins some rounds.
                if k % 2:
                    claimed, cancel = await asyncio.gather(claim(item), cancel_item(canceller, item, ACTOR))
                else:
                    cancel, claimed = await asyncio.gather(cancel_item(canceller, item, ACTOR), claim(item))
                out.append((claimed, cancel.outcome))
            return out
        finally:
            await claimer.close()
            await canceller.close()

    results = asyncio.run(race())
    with psycopg.connect(database_url) as conn:
        final: dict[str, str] = dict(conn.execute("SELECT item_id::text, status::text FROM items").fetchall())
        logged: dict[str, list[str]] = {}
        for item_id, typ in conn.execute("SELECT item_id::text, type FROM item_events ORDER BY version"):
            logged.setdefault(item_id, []).append(typ)
    for item, (claimed, cancel) in zip(items, results, strict=True):
        assert claimed != (cancel == "cancelled"), f"{item}: exactly one side wins"
        if claimed:
            assert (cancel, final[item], logged[item]) == ("too_late", "claimed", ["ItemClaimed"])
        else:
            assert (final[item], logged[item]) == ("abandoned", ["ItemCancelled"])


@pytest.mark.parametrize("first", ["claim", "cancel"])
def test_the_loser_of_a_cancel_claim_race_waits_then_moves_nothing(database_url: str, first: str) -> None:
    """The first side holds its write uncommitted; the second blocks on the row, then finds
    the item no longer in a status it may move."""
    _, _, (item,) = seed_job(database_url, {"g1": 1})

    async def scenario() -> tuple[bool, str]:
        a = await psycopg.AsyncConnection.connect(database_url)
        b = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        try:
            if first == "claim":
                await a.execute(_CLAIM, (item,))
                second = asyncio.create_task(cancel_item(b, item, ACTOR))
                await _blocked(database_url)
                await a.commit()
                return True, (await second).outcome
            await a.execute("SELECT * FROM pacer_cancel_item(%s, %s)", (item, ACTOR))
            task = asyncio.create_task(b.execute(_CLAIM, (item,)))
            await _blocked(database_url)
            await a.commit()
            claimed = len(await (await task).fetchall()) == 1
            return claimed, "cancelled"
        finally:
            await a.close()
            await b.close()

    claimed, cancel = asyncio.run(scenario())
    if first == "claim":
        assert (claimed, cancel) == (True, "too_late")
        assert [e[1] for e in events(database_url, item)] == ["ItemClaimed"]
    else:
        assert not claimed
        assert [e[1] for e in events(database_url, item)] == ["ItemCancelled"]


async def _blocked(url: str) -> None:
    """Wait until some session of this database is waiting on a lock."""
    await eventually(lambda: waiting_for_locks(url), 4, "the second writer waiting on the row lock")


# ---- lock view ----------------------------------------------------------------------------


def test_lock_view_shows_live_and_expired_leases_and_counts(database_url: str) -> None:
    _, _, (live, dead, dup_a, dup_b) = seed_job(database_url, {"g1": 4})
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g1'], 'w1', interval '30 seconds')")
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g2'], 'w2', interval '0 seconds')")
        conn.execute(_CLAIM, (live,))
        conn.execute("SELECT * FROM pacer_transition(ARRAY[%s]::uuid[], '{pending}', 'claimed', 'ItemClaimed',"
                     " p_lease_owner => 'w9', p_lease_ttl => interval '0 seconds')", (dead,))
        for item in (dup_a, dup_b):
            conn.execute("SELECT * FROM pacer_begin_send(%s, 'w1', interval '30 seconds', 'same-key', 'g1', 'r')",
                         (item,))
    asyncio.run(_retry(database_url, live))  # a conflict: the item is executing

    async def view() -> Any:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            return await lock_view(conn)

    v = asyncio.run(view())

    guids = {g["guid"]: g for g in v["guid_leases"]}
    assert (guids["g1"]["owner"], guids["g1"]["expired"], guids["g1"]["epoch"]) == ("w1", False, 1)
    assert guids["g1"]["since"] is not None and guids["g1"]["lease_until"] is not None
    assert guids["g1"]["last_send_at"] is not None
    assert (guids["g2"]["owner"], guids["g2"]["expired"]) == ("w2", True)
    leases = {i["item_id"]: i for i in v["item_leases"]}
    assert set(leases) == {live, dead, dup_a}  # dup_a was submitted; dup_b was intercepted
    assert (leases[live]["status"], leases[live]["lease_owner"], leases[live]["expired"]) == ("claimed", "w1", False)
    assert (leases[dead]["lease_owner"], leases[dead]["expired"]) == ("w9", True)
    assert (leases[dup_a]["status"], leases[dup_a]["expired"]) == ("submitted", False)
    assert v["counts"] == {"guid_leases": 2, "guid_leases_held": 2, "running_items": 3, "expired_leases": 2, "takeovers": 0,
                           "duplicate_intercepts": 1, "retry_conflicts": 1, "forced_releases": 0,
                           "forced_item_releases": 0}


# ---- command line -------------------------------------------------------------------------


def _pacer(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    return int(done.value.code)  # type: ignore[arg-type]  # the CLI exits with an int code


def test_cli_retry_cancel_and_limits_go_through_the_control_api_with_role_and_audit(
        database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    _, _, (failed, delivered, queued) = seed_job(database_url, {"g1": 3})
    move(database_url, failed, "failed")
    move(database_url, delivered, "confirmed")

    assert _pacer(["retry", failed]) == 2
    assert "PACER_CONTROL_URL" in capsys.readouterr().err
    with control_server(database_url) as (api, tokens):
        monkeypatch.setenv("PACER_CONTROL_URL", api)
        monkeypatch.setenv("PACER_TOKEN", tokens["operator"])
        assert _pacer(["retry", failed, "--priority", "0", "--reason", "account fixed"]) == 0
        assert "created: compensation" in capsys.readouterr().out
        assert one(database_url, "SELECT priority FROM items WHERE compensates = %s", failed) == 0
        assert _pacer(["retry", delivered]) == 3
        assert "already_delivered" in capsys.readouterr().err
        assert _pacer(["cancel", queued]) == 0
        assert _pacer(["cancel", queued]) == 3
        assert "already_final" in capsys.readouterr().err
        assert _pacer(["retry", "00000000-0000-0000-0000-000000000001"]) == 1
        # An operator may not change rate limits, from the command line as anywhere else.
        assert _pacer(["limits", "g1", "--set", "min_interval_s=2"]) == 4
        assert "may not change guid rate limits" in capsys.readouterr().err
        monkeypatch.setenv("PACER_TOKEN", tokens["tech_admin"])
        assert _pacer(["limits", "g1", "--set", "min_interval_s=2", "--reason", "slow down"]) == 0
        assert '"min_interval_s": 2.0' in capsys.readouterr().out
        monkeypatch.setenv("PACER_TOKEN", "not-a-token")
        assert _pacer(["cancel", queued]) == 4
    log = rows(database_url, "SELECT actor, action, target_id, reason FROM audit_log"
                             " WHERE actor LIKE 'token:cli-%%' ORDER BY id")
    assert [(a["actor"], a["action"], a["target_id"], a["reason"]) for a in log] == [
        ("token:cli-operator", "retry", failed, "account fixed"),
        ("token:cli-operator", "retry", delivered, None),
        ("token:cli-operator", "cancel", queued, None),
        ("token:cli-operator", "cancel", queued, None),
        ("token:cli-tech_admin", "set_limits", "g1", "slow down"),
    ]


def test_cli_locks(database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PACER_DATABASE_URL", database_url)
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g1'], 'w1', interval '30 seconds')")
    capsys.readouterr()
    assert _pacer(["locks"]) == 0
    text = capsys.readouterr().out
    assert "guid leases" in text and "w1" in text and "running items: 0" in text
    assert _pacer(["locks", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [g["guid"] for g in data["guid_leases"]] == ["g1"] and data["item_leases"] == []
