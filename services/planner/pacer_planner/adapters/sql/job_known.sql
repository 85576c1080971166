-- The job stored for a request id, if any: a request of its tenant delivered again is that
-- job again; another tenant's request under the same id is refused.
SELECT job_id::text AS job_id, dispatched_at IS NOT NULL AS dispatched, target_mode = 'requery' AS paging, tenant
FROM jobs WHERE request_id = %(request_id)s
