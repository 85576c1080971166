-- Job progress: the items of running and paused jobs, by status (from the shard counts the
-- tail keeps, not from the items table).
SELECT c.status::text AS status, sum(c.n)::bigint AS n
FROM shard_status_counts c
JOIN shards s ON s.shard_id = c.shard_id
JOIN jobs j ON j.job_id = s.job_id
WHERE j.status IN ('running', 'paused')
GROUP BY c.status
