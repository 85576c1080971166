-- Recompute the state of the shards a batch touched from their status counts; returns each
-- shard's job and whether the shard's change can change its job's row (``moves_job``): a
-- shard completing (its job may be done), a shard reopening (completed → running: an
-- operator's retry after the shard finished), or any change in a job not yet started (it
-- starts) or marked completed (the job runs again). Only then is the job row locked and
-- refreshed: the batches in between (nearly all of a long job's), and the shards starting,
-- leave the job row, which every segment shares, alone. A shard starting in a running job
-- that has started changes nothing there: a job with a pending shard cannot be completed.
-- A shard reopening must take the row even in a running job: the job may be running only
-- for another shard that another segment is completing at this very moment, and that
-- segment's refresh_jobs, waiting for the row, must then read this shard open; without the
-- row it reads the shard still completed and completes the job over an open shard, whose
-- items stay held ("job completed") for good.
-- The old status is read under the row lock the update takes anyway (FOR NO KEY UPDATE: a
-- foreign key check on the shard does not wait for it); PostgreSQL 14 has no RETURNING old.*.
WITH open_counts AS (
    SELECT c.shard_id,
           sum(c.n) FILTER (WHERE c.status IN ('pending', 'claimed', 'submitted', 'waiting_retry',
                                               'recovery_pending')) AS open_n
    FROM shard_status_counts c
    WHERE c.shard_id = ANY(%(shards)s::bigint[])
    GROUP BY c.shard_id
), before AS MATERIALIZED (
    SELECT s.shard_id, s.status FROM shards s
    WHERE s.shard_id = ANY(%(shards)s::bigint[]) AND s.status IN ('pending', 'running', 'completed')
    ORDER BY s.shard_id
    FOR NO KEY UPDATE
)
UPDATE shards s
SET status = CASE WHEN COALESCE(o.open_n, 0) = 0 THEN 'completed' ELSE 'running' END,
    last_progress_at = now()
FROM open_counts o JOIN before b ON b.shard_id = o.shard_id
WHERE s.shard_id = o.shard_id AND s.status IN ('pending', 'running', 'completed')
RETURNING s.job_id,
          s.status <> b.status
          AND (s.status = 'completed' OR b.status = 'completed'
               OR (SELECT j.started_at IS NULL OR j.status = 'completed' FROM jobs j WHERE j.job_id = s.job_id))
          AS moves_job
