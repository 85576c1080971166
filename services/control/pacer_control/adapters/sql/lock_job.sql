SELECT job_id FROM jobs WHERE job_id = %(job)s::uuid FOR UPDATE
