"""Batched steps do what the same steps one by one do.

A batch of begins (pacer_begin_send_many) takes its common case set-based and hands every
other item to pacer_begin_send; whatever the mix, the outcome of each item and everything
written (items, events, ledger keys, job budgets and holds, guid leases) must equal the
one-by-one path's, item for item, down to the quiet a gateway asked of each submitted item's
guid. Both paths run on the same database, each in a transaction that is rolled back. A batch
of confirms (pacer_confirm_many) guards each item by its own epoch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.integration.helpers import seed_job

OWNER, TTL = "w1", "30 seconds"


def _scenario(url: str) -> list[tuple[str, str, str, str]]:
    """Items of every kind a begin meets, as (item, key, guid, to_id) in a batch's order."""
    _, _, plain = seed_job(url, {"g1": 3, "g2": 2, "g3": 1, "g4": 1, "g5": 1})
    budget_job, _, budgeted = seed_job(url, {"g6": 3})
    paused_job, _, paused = seed_job(url, {"g1": 1})
    _, shards, in_paused_shard = seed_job(url, {"g2": 1})
    _, _, elsewhere = seed_job(url, {"g7": 1})
    with psycopg.connect(url) as conn:
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g1','g2','g4','g5','g6','g7'], %s, %s, '0 s')",
                     (OWNER, TTL))
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g3'], 'w2', %s, '0 s')", (TTL,))  # not ours
        conn.execute("INSERT INTO guid_states (guid, state, source, reason, event_ts)"
                     " VALUES ('g4', 'offline', 'callback', 'logged out', now())")
        conn.execute("UPDATE guid_leases SET paused_reason = 'operator' WHERE guid = 'g5'")
        conn.execute("UPDATE jobs SET budget_max_sends = 2 WHERE job_id = %s", (budget_job,))
        conn.execute("UPDATE jobs SET status = 'paused', paused_reason = 'by hand' WHERE job_id = %s", (paused_job,))
        conn.execute("UPDATE shards SET status = 'paused' WHERE shard_id = %s", (next(iter(shards.values())),))
        # A gateway asked g1 (set-based path) and g6 (budgeted: one by one) for ten minutes' quiet;
        # g2's quiet is over.
        conn.execute("UPDATE guid_leases SET gateway_quiet_until = now() + CASE WHEN guid = 'g2' THEN"
                     " interval '-1 minute' ELSE interval '10 minutes' END WHERE guid IN ('g1', 'g2', 'g6')")
        conn.execute("UPDATE items SET status = 'confirmed' WHERE item_id = %s", (plain[2],))  # g1: not pending
        # g2's two items share a key; g1's second item's key is already another item's.
        conn.execute("UPDATE items SET idem_key = 'shared' WHERE item_id = ANY(%s)", ([plain[3], plain[4]],))
        conn.execute("INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)"
                     " SELECT idem_key, %s, 'g7', 'room-0', 'sent' FROM items WHERE item_id = %s",
                     (elsewhere[0], plain[1]))
        rows = conn.execute("SELECT item_id::text, idem_key, guid, to_id FROM items WHERE item_id = ANY(%s)",
                            ([*plain, *budgeted, *paused, *in_paused_shard],)).fetchall()
    by_id = {r[0]: r for r in rows}
    order = [*budgeted, plain[4], *paused, plain[0], plain[3], *in_paused_shard, plain[1], plain[2], *plain[5:]]
    return [by_id[i] for i in order]


def _written(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    def q(sql: str) -> list[Any]:
        return conn.execute(sql).fetchall()

    return {
        "items": q("SELECT item_id, status, held, version, lease_epoch, lease_owner, attempts FROM items ORDER BY 1"),
        "events": q("SELECT item_id, version, type, from_status, to_status, payload FROM item_events ORDER BY 1, 2"),
        "ledger": q("SELECT idem_key, item_id, state FROM send_ledger ORDER BY 1, 2"),
        "jobs": q("SELECT job_id, status, paused_reason, budget_used FROM jobs ORDER BY 1"),
        "leases": q("SELECT guid, owner, epoch, paused_reason, last_send_at IS NOT NULL, lease_until > now() + '20 s'"
                    " FROM guid_leases ORDER BY 1"),
    }


def _batched(conn: psycopg.Connection[Any], batch: list[tuple[str, str, str, str]]) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT ord, outcome, epoch, attempts, holder, round(quiet_s / 60) FROM pacer_begin_send_many(%s::uuid[], %s,"
        " %s::interval,"
        " %s::text[], %s::text[], %s::text[]) ORDER BY ord",
        ([b[0] for b in batch], OWNER, TTL, [b[1] for b in batch], [b[2] for b in batch], [b[3] for b in batch]),
    ).fetchall()
    return [(batch[r[0] - 1][0], *r[1:]) for r in rows]


def _one_by_one(conn: psycopg.Connection[Any], batch: list[tuple[str, str, str, str]]) -> list[tuple[Any, ...]]:
    out = []
    for item, key, guid, to_id in sorted(batch, key=lambda b: (b[2], b[0])):  # the batch's lock order
        row = conn.execute("SELECT outcome, epoch, attempts, holder, round(quiet_s / 60) FROM pacer_begin_send(%s,"
                           " %s, %s::interval,"
                           " %s, %s, %s)", (item, OWNER, TTL, key, guid, to_id)).fetchone()
        assert row is not None
        out.append((item, *row))
    ids = [b[0] for b in batch]
    return sorted(out, key=lambda o: ids.index(o[0]))


def _run(url: str, path: Any, batch: list[tuple[str, str, str, str]]) -> tuple[list[Any], dict[str, Any]]:
    with psycopg.connect(url) as conn:
        answers = path(conn, batch)
        written = _written(conn)
        conn.rollback()
    return answers, written


def test_a_batch_of_begins_answers_and_writes_exactly_what_the_begins_one_by_one_do(database_url: str) -> None:
    batch = _scenario(database_url)
    batched, batched_writes = _run(database_url, _batched, batch)
    single, single_writes = _run(database_url, _one_by_one, batch)

    assert batched == single
    for what in batched_writes:
        assert batched_writes[what] == single_writes[what], what
    # Every answer a begin can give is in the batch: submitted (g1's first item, the first of
    # g2's pair, two of the budget's three), duplicate (g1's taken key, the second of g2's
    # pair), not_pending, guid_lost (g3) and held (offline g4, paused g5, the budget's third,
    # the paused job, the paused shard).
    assert Counter(a[1] for a in batched) == {"submitted": 4, "duplicate": 2, "not_pending": 1,
                                             "guid_lost": 1, "held": 5}
    # Each submitted item comes with the minutes left of its guid's quiet; nothing else with one.
    guid_of = {b[0]: b[2] for b in batch}
    assert sorted((guid_of[a[0]], a[5]) for a in batched if a[1] == "submitted") == [
        ("g1", 10), ("g2", None), ("g6", 10), ("g6", 10)]
    assert all(a[5] is None for a in batched if a[1] != "submitted")


def test_a_batch_of_plain_begins_writes_each_items_events_with_its_own_attempt(database_url: str) -> None:
    _, _, items = seed_job(database_url, {"g1": 2, "g2": 2})
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g1','g2'], %s, %s, '0 s')", (OWNER, TTL))
        conn.execute("UPDATE items SET attempts = 2 WHERE item_id = %s", (items[1],))
        batch = conn.execute("SELECT item_id::text, idem_key, guid, to_id FROM items ORDER BY item_id DESC").fetchall()
        conn.commit()
        answers = _batched(conn, batch)
        events = conn.cursor(row_factory=dict_row).execute(
            "SELECT item_id::text, type, payload FROM item_events ORDER BY seq").fetchall()
    assert [a[1] for a in answers] == ["submitted"] * 4
    assert {a[0]: a[3] for a in answers}[items[1]] == 2
    submitted = {e["item_id"]: e["payload"] for e in events if e["type"] == "ItemSubmitted"}
    assert submitted == {i: {"attempt": 3 if i == items[1] else 1, "budgeted": False} for i in items}
    assert [e["payload"] for e in events if e["type"] == "ItemClaimed"] == [{"owner": OWNER}] * 4


def test_a_batch_of_confirms_moves_only_the_items_whose_own_epoch_matches(database_url: str) -> None:
    _, _, items = seed_job(database_url, {"g1": 2, "g2": 2, "g3": 1})
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g1','g2','g3'], %s, %s, '0 s')", (OWNER, TTL))
        batch = conn.execute("SELECT item_id::text, idem_key, guid, to_id FROM items WHERE item_id = ANY(%s)",
                             ([*items[:3], items[4]],)).fetchall()
        conn.commit()
        epochs = {a[0]: a[2] for a in _batched(conn, batch)}
        conn.commit()
        keys = {b[0]: b[1] for b in batch}
        # items[0], items[2]: their epochs; items[1], items[4] (g3's): stale ones; items[3]: never begun.
        given = [(items[0], epochs[items[0]]), (items[1], epochs[items[1]] - 1), (items[2], epochs[items[2]]),
                 (items[3], 1), (items[4], epochs[items[4]] - 1)]
        moved = conn.execute(
            "SELECT ord, moved FROM pacer_confirm_many(%s::uuid[], %s::bigint[], %s::text[], %s::jsonb[]) ORDER BY ord",
            ([i for i, _ in given], [e for _, e in given], [keys.get(i, "none") for i, _ in given],
             [f'{{"code": 0, "n": {n}}}' for n in range(5)])).fetchall()
        conn.commit()
        status: dict[str, Any] = dict(conn.execute("SELECT item_id::text, status FROM items").fetchall())
        ledger: dict[str, Any] = dict(conn.execute("SELECT item_id::text, state || ':' || COALESCE(receipt->>'n', '-')"
                                   " FROM send_ledger").fetchall())
        confirmed: dict[str, Any] = dict(conn.execute("SELECT item_id::text, payload FROM item_events"
                                      " WHERE type = 'ItemConfirmed'").fetchall())
        answered: dict[str, Any] = dict(conn.execute("SELECT guid, last_answer_at IS NOT NULL FROM guid_leases").fetchall())
    assert moved == [(1, True), (2, False), (3, True), (4, False), (5, False)]
    assert [status[i] for i in items] == ["confirmed", "submitted", "confirmed", "pending", "submitted"]
    assert ledger == {items[0]: "sent:0", items[1]: "reserved:-", items[2]: "sent:2", items[4]: "reserved:-"}
    assert confirmed == {items[0]: {"receipt": {"code": 0, "n": 0}}, items[2]: {"receipt": {"code": 0, "n": 2}}}
    assert answered == {"g1": True, "g2": True, "g3": False}


def test_before_the_statistics_know_a_partition_a_batch_of_begins_finds_its_items_by_id_alone(
    database_url: str,
) -> None:
    """A new week's items partition has no statistics until autovacuum analyzes it. A batch's
    plan made then must still look its items up by id alone: ANDed with a scan of the index of
    every queued item, each batch read the whole queue (30 ms to over a second at 10,000
    guids, in bench scale)."""
    job_id, shards, (first, *_) = seed_job(database_url, {"g1": 1})
    with psycopg.connect(database_url, autocommit=True) as conn:
        (partition,) = conn.execute("SELECT tableoid::regclass::text FROM items WHERE item_id = %s", (first,)).fetchone()
        conn.execute(f"ALTER TABLE {partition} SET (autovacuum_enabled = off)")  # no statistics, as when new
        conn.execute("INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind)"
                     " SELECT pacer_item_id(now()), %s, %s, 'g1', 'room-' || n, 'hi', 'k-' || n, 3, 'campaign'"
                     " FROM generate_series(1, 30000) AS n", (job_id, shards["g1"]))
        conn.execute("SELECT * FROM pacer_acquire_guids(ARRAY['g1'], %s, %s, '0 s')", (OWNER, TTL))
        batch = conn.execute("SELECT item_id::text, idem_key, guid, to_id FROM items ORDER BY item_id LIMIT 25").fetchall()
        (analyzed,) = conn.execute("SELECT last_autoanalyze IS NOT NULL OR last_analyze IS NOT NULL"
                                   " FROM pg_stat_user_tables WHERE relid = %s::regclass", (partition,)).fetchone()
        assert not analyzed
        plans: list[str] = []
        conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the plan is read through auto_explain, which this database user may not load"
                        " (PACER_DATABASE_URL names a user that is not a superuser)")
        for setting, value in (("log_min_duration", "0"), ("log_nested_statements", "on"), ("log_level", "notice")):
            conn.execute(f"SET auto_explain.{setting} = '{value}'")
        begun = conn.execute("SELECT outcome FROM pacer_begin_send_many(%s::uuid[], %s, %s::interval, %s::text[],"
                             " %s::text[], %s::text[])", ([r[0] for r in batch], OWNER, TTL, [r[1] for r in batch],
                                                           [r[2] for r in batch], [r[3] for r in batch])).fetchall()
    assert [o for (o,) in begun] == ["submitted"] * 25
    (mine,) = [p for p in plans if "WITH mine AS MATERIALIZED" in p]
    cte = mine.split("CTE mine", 1)[1].split("InitPlan", 1)[0]
    assert "BitmapAnd" not in cte and f"Seq Scan on {partition} " not in cte, cte
