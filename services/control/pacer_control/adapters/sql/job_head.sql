SELECT job_id::text AS job_id, request_id, status, tenant, created_at FROM jobs WHERE job_id = %(job)s::uuid
