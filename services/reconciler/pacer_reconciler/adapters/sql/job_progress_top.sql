-- The open jobs (running or paused) with the most items not yet in a final status, for the
-- dashboards' top-N: each with its items in a final status (%(final)s, the transition table's
-- terminal statuses) and all its items, from the shard counts the tail keeps (not the items
-- table). A requery job counts the pages fetched so far.
SELECT j.job_id::text AS job_id, j.kind, j.tenant, j.status,
       COALESCE(sum(c.n) FILTER (WHERE c.status::text = ANY(%(final)s::text[])), 0)::bigint AS done,
       COALESCE(sum(c.n), 0)::bigint AS items
FROM jobs j
LEFT JOIN shards s ON s.job_id = j.job_id
LEFT JOIN shard_status_counts c ON c.shard_id = s.shard_id
WHERE j.status IN ('running', 'paused')
GROUP BY j.job_id
ORDER BY COALESCE(sum(c.n) FILTER (WHERE NOT c.status::text = ANY(%(final)s::text[])), 0) DESC, j.created_at, j.job_id
LIMIT %(limit)s
