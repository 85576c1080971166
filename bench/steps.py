"""``bench steps``: Postgres time per item of the sender's two durable steps, against the same
rows written bare.

``BENCH_STEPS_ITEMS`` items over 200 guids (two jobs of that size, one per side), in batches
of 25 (a sender's batch under load), on one connection, nothing else running:

* pacer: ``pacer_begin_send_many`` then ``pacer_confirm_many`` per batch, as the sender
  runs them (one autocommit statement each: guards, locks, holds, budgets, duplicate keys);
* bare: the rows those steps write — two item row versions (claimed and submitted in one,
  then confirmed) with their three events, the ledger key inserted then marked sent, the
  guid lease's send and answer times — as plain statements in two synchronously committed
  transactions per batch, nothing checked.

Then ``pacer_ms_per_item_b500``: the pacer side again in batches of 500 (what gathers while a
sender at 10,000 guids is behind) over 10,000 guids, one item of each guid per batch as the
sender's workers ask; ``ratio_b500`` = that over batch 25. A step whose cost grows with the
square of the batch (a join planned for the ten-odd rows a generic plan expects) shows here.

Measured as the server backend's CPU time (``/proc``) when the project started the server on
this machine; against a configured ``PACER_DATABASE_URL``, as the client's wall time.
``ratio`` = bare / pacer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from bench.common import CORES, cpu_s, drop_db, env_int, fresh_db, real_infra, seed_items
from pacer_common.domain.commands import ItemCommand

BATCH, GUIDS = 25, 200
BIG_BATCH, BIG_GUIDS = 500, 10_000
RECEIPT = {"code": 0, "msg": "ok", "msg_id": "m" * 36, "latency_ms": 4.9}

BARE_BEGIN = (
    "WITH c AS (UPDATE items SET status = 'submitted', version = version + 2, updated_at = now(),"
    " lease_epoch = lease_epoch + 1, lease_owner = 'bare', lease_until = now() + interval '1 minute',"
    " attempts = attempts + 1 WHERE item_id = ANY(%(ids)b::uuid[])"
    " RETURNING item_id, job_id, shard_id, guid, version)"
    " INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)"
    " SELECT item_id, job_id, shard_id, guid, version - 1, 'ItemClaimed', 'pending'::item_status,"
    " 'claimed'::item_status, '{}'::jsonb FROM c"
    " UNION ALL"
    " SELECT item_id, job_id, shard_id, guid, version, 'ItemSubmitted', 'claimed', 'submitted', '{}' FROM c",
    "INSERT INTO send_ledger (idem_key, item_id, guid, to_id, state)"
    " SELECT k, i, g, t, 'reserved' FROM unnest(%(keys)b::text[], %(ids)b::uuid[], %(guids)b::text[],"
    " %(to_ids)b::text[]) AS x(k, i, g, t)",
    "UPDATE guid_leases SET last_send_at = now() WHERE guid = ANY(%(guids)b::text[])",
)
BARE_CONFIRM = (
    "WITH c AS (UPDATE items SET status = 'confirmed', version = version + 1, lease_owner = NULL,"
    " lease_until = NULL WHERE item_id = ANY(%(ids)b::uuid[]) RETURNING item_id, job_id, shard_id, guid, version)"
    " INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)"
    " SELECT item_id, job_id, shard_id, guid, version, 'ItemConfirmed', 'submitted', 'confirmed',"
    " jsonb_build_object('receipt', %(receipt)s::jsonb) FROM c",
    "UPDATE send_ledger SET state = 'sent', receipt = %(receipt)s::jsonb, sent_at = now()"
    " WHERE idem_key = ANY(%(keys)b::text[]) AND item_id = ANY(%(ids)b::uuid[])",
    "UPDATE guid_leases SET last_answer_at = now() WHERE guid = ANY(%(guids)b::text[])",
)


def steps() -> str:
    n = env_int("BENCH_STEPS_ITEMS", 10_000)
    local = os.environ.get("PACER_DATABASE_URL") is None
    inf = real_infra()
    url = fresh_db(inf, "steps")
    try:
        pacer_jobs = seed_items(url, GUIDS, max(1, n // GUIDS)).commands
        bare_jobs = seed_items(url, GUIDS, max(1, n // GUIDS)).commands
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT * FROM pacer_acquire_guids((SELECT array_agg(DISTINCT guid) FROM items), 'bench',"
                         " interval '1 hour', interval '0 s')")
            pacer_s = _measured(conn, pacer_jobs, _pacer_batch, local)
            bare_s = _measured(conn, bare_jobs, _bare_batch, local)
        big = seed_items(url, BIG_GUIDS, 2).commands  # each guid's first item, then each guid's second
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT * FROM pacer_acquire_guids((SELECT array_agg(DISTINCT guid) FROM items), 'bench',"
                         " interval '1 hour', interval '0 s')")
            # As a running installation has them (the ledger left alone: empty, see runbook).
            conn.execute("ANALYZE shards, guid_leases, guid_states, jobs")
            big_s = _measured(conn, big, _pacer_batch, local, BIG_BATCH)
            confirmed = conn.execute("SELECT count(*) FROM items WHERE status = 'confirmed'").fetchone()
        assert confirmed == (len(pacer_jobs) + len(bare_jobs) + len(big),), confirmed
    finally:
        drop_db(url)
    what = "server_cpu" if local else "client_wall"
    items = len(pacer_jobs)
    return (f"bench steps: items={items} batch={BATCH} pacer_ms_per_item={pacer_s / items * 1000:.3f} "
            f"bare_ms_per_item={bare_s / len(bare_jobs) * 1000:.3f} ratio={bare_s / pacer_s:.2f} "
            f"pacer_ms_per_item_b500={big_s / len(big) * 1000:.3f} "
            f"ratio_b500={(big_s / len(big)) / (pacer_s / items):.2f} measured={what} "
            f"cores={CORES}")


def _measured(conn: psycopg.Connection[Any], cmds: list[ItemCommand],
              batch: Callable[[psycopg.Connection[Any], list[ItemCommand]], None], local: bool,
              size: int = BATCH) -> float:
    """Seconds of the backend's CPU (or of the client's wall clock) the batches took."""
    pid = conn.info.backend_pid
    clock: Callable[[], float] = (lambda: cpu_s(pid)) if local else time.perf_counter
    started = clock()
    for at in range(0, len(cmds), size):
        batch(conn, cmds[at:at + size])
    return clock() - started


def _pacer_batch(conn: psycopg.Connection[Any], b: list[ItemCommand]) -> None:
    rows = conn.execute(
        "SELECT ord, outcome, epoch FROM pacer_begin_send_many(%b::uuid[], 'bench', interval '1 minute',"
        " %b::text[], %b::text[], %b::text[])",
        ([c.item_id for c in b], [c.idem_key for c in b], [c.guid for c in b], [c.to_id for c in b])).fetchall()
    assert all(r[1] == "submitted" for r in rows), rows
    epochs = {r[0]: r[2] for r in rows}
    conn.execute("SELECT ord, moved FROM pacer_confirm_many(%b::uuid[], %b::bigint[], %b::text[], %b::jsonb[])",
                 ([c.item_id for c in b], [epochs[k + 1] for k in range(len(b))], [c.idem_key for c in b],
                  [Jsonb(RECEIPT)] * len(b))).fetchall()


def _bare_batch(conn: psycopg.Connection[Any], b: list[ItemCommand]) -> None:
    params = {"ids": [c.item_id for c in b], "keys": [c.idem_key for c in b], "guids": [c.guid for c in b],
              "to_ids": [c.to_id for c in b], "receipt": Jsonb(RECEIPT)}
    for statements in (BARE_BEGIN, BARE_CONFIRM):
        with conn.pipeline(), conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = on")
            for sql in statements:
                conn.execute(sql, params)
