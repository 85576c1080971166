UPDATE jobs SET target_owner = NULL, target_lease_until = NULL
WHERE job_id = %(job_id)s AND target_owner = %(owner)s
