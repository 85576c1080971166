-- Before refresh_jobs, in its own statement: take the jobs' rows in a fixed order. Segments
-- complete a job's shards in separate transactions; the second to lock reads the shards
-- after the first committed, so the last shard to complete always completes the job.
-- FOR NO KEY UPDATE, the lock refresh_jobs' update takes anyway: it does not wait for a
-- transaction that only references the job (a planner's page creating a shard or recording
-- itself takes the job's key share), which may itself be waiting for a count this segment holds.
SELECT job_id FROM jobs WHERE job_id = ANY(%(jobs)s::uuid[]) ORDER BY job_id FOR NO KEY UPDATE
