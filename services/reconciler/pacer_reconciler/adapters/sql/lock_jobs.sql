-- Before refresh_jobs, in its own statement: take the jobs' rows in a fixed order. Segments
-- complete a job's shards in separate transactions; the second to lock reads the shards
-- after the first committed, so the last shard to complete always completes the job.
SELECT job_id FROM jobs WHERE job_id = ANY(%(jobs)s::uuid[]) ORDER BY job_id FOR UPDATE
