SELECT job_id::text AS job_id, request_id, status FROM jobs WHERE job_id = %(job)s::uuid
