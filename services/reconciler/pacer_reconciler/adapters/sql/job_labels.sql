-- The tenant and the request's trace context of each job named: what the reconciler puts in
-- the headers of the job's outcomes. Neither changes after the job is stored.
SELECT job_id::text AS job_id, tenant, traceparent FROM jobs WHERE job_id = ANY(%(jobs)s::uuid[])
