-- Take (or renew) the paging lease of one requery job; a live lease of another planner wins.
-- The job's status comes back for the pager to decide: it pages only a running job.
UPDATE jobs
SET target_owner = %(owner)s, target_lease_until = now() + make_interval(secs => %(ttl_s)s)
WHERE job_id = %(job_id)s AND target_mode = 'requery' AND dispatched_at IS NULL
  AND (target_owner IS NULL OR target_owner = %(owner)s OR target_lease_until < now())
RETURNING job_id::text AS job_id, request, status, target_cursor, target_pages,
          target_complete_at IS NOT NULL AS complete, created_at, traceparent
