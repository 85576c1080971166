-- End a target set early (the request expired while paging): no more pages are fetched.
UPDATE jobs SET target_complete_at = now(), target_wait_reason = %(reason)s
WHERE job_id = %(job_id)s AND target_owner = %(owner)s AND target_complete_at IS NULL
