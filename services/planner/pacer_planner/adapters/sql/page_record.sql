-- Where paging stands, on the job, and the page's own record, in the page's transaction.
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
    WHERE job_id = %(job_id)s
)
INSERT INTO job_target_pages (job_id, page_no, cursor_in, cursor_out, fetched, added, duplicates,
                              invalid, first_error, fetched_at)
VALUES (%(job_id)s, %(page_no)s, %(cursor_in)s, %(cursor_out)s, %(fetched)s, %(added)s, %(duplicates)s,
        %(invalid)s, %(first_error)s, %(fetched_at)s)
