-- Requery jobs that need a pager (the view requery_jobs_paging says which) and whose paging
-- lease no other planner holds alive.
SELECT job_id::text AS job_id
FROM requery_jobs_paging
WHERE target_owner IS NULL OR target_owner = %(owner)s OR target_lease_until < now()
ORDER BY created_at
LIMIT %(limit)s
