-- A shard reopening (an operator's retry after the shard finished) in a job that was still
-- running did not take the job's row, so a reconciler segment completing the job's last
-- other shard at the same moment could read the reopened shard still completed and complete
-- the job over it; the retry's item then stayed held ("job completed"). A retry now
-- reopens the shard and job itself, and refresh_shards.sql takes the row for a reopening. A
-- job completed while one of its shards is open runs again here: the jobs_hold_lifted
-- trigger asks the release sweep for its held items.

UPDATE jobs j
SET status = 'running', finished_at = NULL
WHERE j.status = 'completed'
  AND EXISTS (SELECT 1 FROM shards s WHERE s.job_id = j.job_id AND s.status IN ('pending', 'running'));
