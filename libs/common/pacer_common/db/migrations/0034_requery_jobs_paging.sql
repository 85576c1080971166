-- Requery jobs whose targets the planners are still paging in: paging not finished while the
-- job runs, or finished with the last pages' commands not yet flushed (dispatched_at unset).
-- One definition for the two that ask: the planners' pagers (paging_candidates.sql, which
-- adds the paging lease) and `pacer after-restore` (requery_paging.sql, which waits for none
-- to be left). A view is expanded into each query, so jobs_requery_open still serves both.
CREATE VIEW requery_jobs_paging AS
SELECT job_id, request_id, created_at, target_owner, target_lease_until
FROM jobs
WHERE target_mode = 'requery' AND dispatched_at IS NULL
  AND (target_complete_at IS NOT NULL OR status = 'running');
