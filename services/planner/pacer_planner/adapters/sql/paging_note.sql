UPDATE jobs SET target_wait_reason = %(reason)s WHERE job_id = %(job_id)s
