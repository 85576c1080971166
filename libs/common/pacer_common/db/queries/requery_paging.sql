-- Requery jobs whose targets the planners are still paging in (the view requery_jobs_paging),
-- whoever holds the lease: `pacer after-restore` waits for none to be left.
SELECT request_id FROM requery_jobs_paging
ORDER BY created_at
