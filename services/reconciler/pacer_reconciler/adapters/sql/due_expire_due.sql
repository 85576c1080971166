-- Candidates for the 'expire_due' sweep in this replica's segments: queued items (pending,
-- held or not, and waiting_retry) past their expire_at, soonest expired first; SKIP LOCKED
-- keeps off rows in use. The sender expires an item when it reaches the front of its guid's
-- queue; one that no worker reaches (its guid not online or paused, its job paused or
-- awaiting approval, its shard paused) would otherwise stay queued for ever, its shard and
-- job open and its week's partitions kept. A claim needs the row pending under its lock, so
-- of a claim and this sweep exactly one moves the item. Nothing is freed in the ledger: a
-- queued item holds no reserved key (pacer_abandon_cancelled says why), as at the sender's
-- own expiry.
-- Those of a cancelled job are abandoned instead, as the cancel abandons what waits and the
-- retry sweep does (due_retry_due.sql), and are not returned.
-- Read through items_expire_due, a range of it per partition merged in expire_at order; until
-- that index is valid (a migrate building it online), nothing is read: the one-time check
-- below, not a read of every queued item on every round.
WITH due AS MATERIALIZED (
    SELECT item_id, job_id, guid, expire_at
    FROM items
    WHERE status IN ('pending', 'waiting_retry') AND expire_at <= now()
      AND {guid_segment} = ANY(%(segments)s::int[])
      AND (SELECT x.indisvalid FROM pg_index x WHERE x.indexrelid = to_regclass('items_expire_due'))
    ORDER BY expire_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), cancelled AS MATERIALIZED (
    SELECT pacer_abandon_cancelled(array_agg(d.item_id)) AS ids
    FROM due d
    WHERE (SELECT j.status FROM jobs j WHERE j.job_id = d.job_id) = 'cancelled'
)
-- The abandoned ids are read (and so the abandonment made) as the first due row is filtered.
SELECT d.item_id::text AS item_id, d.guid, d.expire_at
FROM due d
WHERE d.item_id <> ALL(COALESCE((SELECT c.ids FROM cancelled c), '{}'))
ORDER BY d.expire_at
