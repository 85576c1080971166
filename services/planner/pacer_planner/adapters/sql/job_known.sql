-- The job stored for a request id, if any: a request delivered again is that job again.
SELECT job_id::text AS job_id, dispatched_at IS NOT NULL AS dispatched, target_mode = 'requery' AS paging
FROM jobs WHERE request_id = %(request_id)s
