UPDATE jobs SET dispatched_at = now() WHERE job_id = %(job_id)s AND dispatched_at IS NULL
