-- Each shard's pending count in the projection grows by the items the page added, the rows
-- taken in shard order: the order of the reconciler's apply_counts.sql, which holds them
-- while it waits for shard and job rows (page_lock.sql).
INSERT INTO shard_status_counts AS c (shard_id, status, n)
SELECT u.shard_id, 'pending', u.n
FROM unnest(%(shards)s::bigint[], %(added)s::bigint[]) AS u(shard_id, n)
ORDER BY u.shard_id
ON CONFLICT (shard_id, status) DO UPDATE SET n = c.n + EXCLUDED.n
