-- A job's shards that are not completed: the reconciler completes a job when none is left
-- (refresh_jobs.sql), a probe of this index instead of a read of every shard of the job.
CREATE INDEX shards_open ON shards (job_id) WHERE status <> 'completed';
