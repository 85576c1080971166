-- The open jobs (running or paused) with the most items not yet in a final status, for the
-- dashboards' top-N: each with its items (jobs.total: the planned ones, the pages fetched so
-- far of a requery job, and compensations) and those of them done, all but the items left.
-- Items left are counted over the job's open shards alone (the partial index shards_open),
-- from the counts the tail keeps: a long job's completed shards are not read each round.
-- %(final)s: the transition table's terminal statuses.
WITH open_jobs AS (
    SELECT j.job_id, j.kind, j.tenant, j.status, j.total, j.created_at
    FROM jobs j WHERE j.status IN ('running', 'paused')
), left_n AS (
    SELECT o.job_id, COALESCE(sum(c.n) FILTER (WHERE NOT c.status::text = ANY(%(final)s::text[])), 0)::bigint AS n
    FROM open_jobs o
    LEFT JOIN shards s ON s.job_id = o.job_id AND s.status <> 'completed'
    LEFT JOIN shard_status_counts c ON c.shard_id = s.shard_id
    GROUP BY o.job_id
)
SELECT o.job_id::text AS job_id, o.kind, o.tenant, o.status,
       GREATEST(o.total - l.n, 0)::bigint AS done, GREATEST(o.total, l.n)::bigint AS items
FROM open_jobs o JOIN left_n l USING (job_id)
ORDER BY l.n DESC, o.created_at, o.job_id
LIMIT %(limit)s
