-- Each shard's total grows by the items the page added, and a shard the reconciler had
-- completed reopens, as pacer_retry_items does for a compensation. After page_counts.sql,
-- the rows locked in shard order first (refresh_shards.sql's order): whatever the plan,
-- a row is updated only once it and every row before it are locked.
WITH locked AS MATERIALIZED (
    SELECT s.shard_id FROM shards s
    WHERE s.shard_id = ANY(%(shards)s::bigint[])
    ORDER BY s.shard_id
    FOR NO KEY UPDATE
)
UPDATE shards s
SET total = s.total + u.n,
    status = CASE WHEN s.status = 'completed' THEN 'running' ELSE s.status END
FROM unnest(%(shards)s::bigint[], %(added)s::bigint[]) AS u(shard_id, n)
JOIN locked l ON l.shard_id = u.shard_id
WHERE s.shard_id = u.shard_id
