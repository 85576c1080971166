-- A running job is completed once every one of its shards is.
UPDATE jobs j
SET started_at = COALESCE(j.started_at, now()),
    status = CASE WHEN done.all_done THEN 'completed' ELSE 'running' END,
    finished_at = CASE WHEN done.all_done THEN now() ELSE NULL END
FROM (
    SELECT job_id, bool_and(status = 'completed') AS all_done
    FROM shards WHERE job_id = ANY(%(jobs)s::uuid[]) GROUP BY job_id
) AS done
WHERE j.job_id = done.job_id AND j.status IN ('running', 'completed')
