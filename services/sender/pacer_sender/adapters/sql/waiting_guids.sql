-- Guids with work a sender may have to start, whatever happened to their Kafka commands:
-- a pending item, not held, ready now or due within the horizon, that pacer_begin_send
-- could claim (its job running, its shard and its guid not paused, the guid `online` or of
-- unknown state).
--
-- A loose index scan finds each distinct queued guid with one index probe, so the sweep
-- costs one probe per guid with queued work, not one row per item; per guid, LIMIT 1 stops
-- at its first claimable item. ``overdue``: that item has been ready for longer than the
-- grace, so its command should long have been handled; ``item_id``: that item (the sender
-- pokes a guid it runs a worker for only if the worker does not hold it).
--
-- Only the guids of the sender's own partitions. ``buckets``: the buckets (CRC modulo 5760,
-- pacer_sender.domain.partitions.GUID_BUCKETS) that make up its partitions; the scan then
-- walks items_guid_queued_bucket, one chain of probes per bucket, and reads its own guids
-- alone. Without buckets (a partition count that does not divide 5760, or no pairs at all),
-- without the CRC (pacer_guid_crc NULL, before PostgreSQL 18) or without that index valid (not
-- yet built, or being built online: pacer_common.db.online_indexes), it walks
-- every queued guid (items_guid_queued) and the pairs below keep the sender's own: ``counts``
-- and ``parts`` pair a partition count with a partition assigned to it (one pair per
-- partition of either lane topic), and a guid is its sender's if its CRC modulo a count is
-- that count's partition (no pairs at all, NULL: every guid). That filter runs before the
-- per-guid lateral read, so a sender among many reads the lateral for its share of the guids
-- only. Where the server has no CRC every guid comes back and the sender keeps its own.
WITH RECURSIVE by_bucket(usable) AS (
    SELECT %(buckets)s::int[] IS NOT NULL AND pacer_guid_crc('') IS NOT NULL
           AND EXISTS (SELECT 1 FROM pg_index x
                       WHERE x.indexrelid = to_regclass('items_guid_queued_bucket') AND x.indisvalid)
), queued(bucket, guid) AS (
    ((SELECT NULL::int, (SELECT guid FROM items WHERE status IN ('pending', 'waiting_retry')
                         ORDER BY guid LIMIT 1)
      WHERE NOT (SELECT usable FROM by_bucket))
     UNION ALL
     SELECT b, (SELECT guid FROM items WHERE status IN ('pending', 'waiting_retry')
                  AND pacer_guid_crc(guid) %% 5760 = b ORDER BY guid LIMIT 1)
     FROM unnest(%(buckets)s::int[]) b
     WHERE (SELECT usable FROM by_bucket))
    UNION ALL
    SELECT q.bucket,
           CASE WHEN q.bucket IS NULL
                THEN (SELECT i.guid FROM items i
                      WHERE i.status IN ('pending', 'waiting_retry') AND i.guid > q.guid
                      ORDER BY i.guid LIMIT 1)
                ELSE (SELECT i.guid FROM items i
                      WHERE i.status IN ('pending', 'waiting_retry')
                        AND pacer_guid_crc(i.guid) %% 5760 = q.bucket AND i.guid > q.guid
                      ORDER BY i.guid LIMIT 1) END
    FROM queued q
    WHERE q.guid IS NOT NULL
)
SELECT q.guid, f.ready_since < now() - %(grace)s::interval AS overdue, f.item_id
FROM queued q
CROSS JOIN LATERAL (
    SELECT greatest(i.updated_at, i.not_before) AS ready_since, i.item_id::text AS item_id
    FROM items i
    JOIN jobs j ON j.job_id = i.job_id
    JOIN shards s ON s.shard_id = i.shard_id
    WHERE i.guid = q.guid AND i.status = 'pending' AND NOT i.held
      AND (i.not_before IS NULL OR i.not_before <= now() + %(horizon)s::interval)
      AND j.status = 'running' AND s.status <> 'paused'
    LIMIT 1
) f
WHERE q.guid IS NOT NULL
  AND (%(counts)s::int[] IS NULL OR pacer_guid_crc(q.guid) IS NULL
       OR EXISTS (SELECT 1 FROM unnest(%(counts)s::int[], %(parts)s::int[]) o(n, p)
                  WHERE pacer_guid_crc(q.guid) %% o.n = o.p))
  AND NOT EXISTS (SELECT 1 FROM guid_leases l WHERE l.guid = q.guid AND l.paused_reason IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM guid_states h WHERE h.guid = q.guid AND h.state <> 'online')
