-- Requery jobs that need a pager: paging not finished (and the job running), or the last
-- pages' commands not yet flushed; and no live lease held by another planner.
SELECT job_id::text AS job_id
FROM jobs
WHERE target_mode = 'requery' AND dispatched_at IS NULL
  AND (target_complete_at IS NOT NULL OR status = 'running')
  AND (target_owner IS NULL OR target_owner = %(owner)s OR target_lease_until < now())
ORDER BY created_at
LIMIT %(limit)s
