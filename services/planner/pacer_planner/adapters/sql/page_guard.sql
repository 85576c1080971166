-- The page's guard, read after page_lock.sql (a snapshot taken after the wait): still ours,
-- still the page we fetched, the set still open and the job running or paused. A page that
-- fails it writes nothing; page_record.sql checks it again under the job's row lock.
SELECT status, target_pages, target_owner, target_complete_at IS NOT NULL AS complete
FROM jobs WHERE job_id = %(job_id)s
