-- Requery jobs whose targets the planners are still paging in (as paging_candidates.sql in
-- the planner, whoever holds the lease): `pacer after-restore` waits for none to be left.
SELECT request_id FROM jobs
WHERE target_mode = 'requery' AND dispatched_at IS NULL
  AND (target_complete_at IS NOT NULL OR status = 'running')
ORDER BY created_at
