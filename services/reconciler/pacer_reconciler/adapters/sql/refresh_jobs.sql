-- A running job is completed once every one of its shards is; a completed one whose shard
-- reopened runs again. "Every shard" is a probe of the partial index shards_open (a job's
-- shards not completed), not a count over all of them: a job of 100,000 shards completes
-- one shard at a time.
UPDATE jobs j
SET started_at = COALESCE(j.started_at, now()),
    status = CASE WHEN done.all_done THEN 'completed' ELSE 'running' END,
    finished_at = CASE WHEN done.all_done THEN now() ELSE NULL END
FROM (
    SELECT u.job_id, NOT EXISTS (SELECT 1 FROM shards s WHERE s.job_id = u.job_id AND s.status <> 'completed')
               AS all_done
    FROM unnest(%(jobs)s::uuid[]) AS u(job_id)
) AS done
WHERE j.job_id = done.job_id AND j.status IN ('running', 'completed')
