-- Where paging stands, on the job, and the page's own record, in the page's transaction: the
-- job's row is the last it takes (page_lock.sql), and the guard is checked again under it.
-- No row comes back when another planner took the lease, the page was stored already, the
-- set was completed or the job stopped since page_guard.sql: the page's transaction is then
-- rolled back whole.
WITH job AS (
    UPDATE jobs
    SET total = total + %(added)s,
        target_cursor = %(cursor_out)s,
        target_pages = %(page_no)s,
        target_fetched = target_fetched + %(fetched)s,
        target_duplicates = target_duplicates + %(duplicates)s,
        target_invalid = target_invalid + %(invalid)s,
        target_complete_at = CASE WHEN %(last)s THEN now() END,
        target_wait_reason = NULL,
        target_lease_until = now() + make_interval(secs => %(ttl_s)s)
    WHERE job_id = %(job_id)s AND target_owner = %(owner)s AND target_pages = %(page_no)s - 1
      AND target_complete_at IS NULL AND status IN ('running', 'paused')
    RETURNING job_id
)
INSERT INTO job_target_pages (job_id, page_no, cursor_in, cursor_out, fetched, added, duplicates,
                              invalid, first_error, fetched_at)
SELECT job_id, %(page_no)s, %(cursor_in)s, %(cursor_out)s, %(fetched)s, %(added)s, %(duplicates)s,
       %(invalid)s, %(first_error)s, %(fetched_at)s
FROM job
RETURNING page_no
