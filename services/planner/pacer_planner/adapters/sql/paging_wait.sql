-- Why paging is not moving right now; the next stored page clears it.
UPDATE jobs SET target_wait_reason = %(reason)s
WHERE job_id = %(job_id)s AND target_owner = %(owner)s
