-- Recompute the state of the shards a batch touched from their status counts.
WITH open_counts AS (
    SELECT c.shard_id,
           sum(c.n) FILTER (WHERE c.status IN ('pending', 'claimed', 'submitted', 'waiting_retry',
                                               'recovery_pending')) AS open_n
    FROM shard_status_counts c
    WHERE c.shard_id = ANY(%(shards)s::bigint[])
    GROUP BY c.shard_id
)
UPDATE shards s
SET status = CASE WHEN COALESCE(o.open_n, 0) = 0 THEN 'completed' ELSE 'running' END,
    last_progress_at = now()
FROM open_counts o
WHERE s.shard_id = o.shard_id AND s.status IN ('pending', 'running', 'completed')
RETURNING s.job_id
