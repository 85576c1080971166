-- The page's guard, under the job's row lock: still ours, still the page we fetched.
SELECT status, target_pages, target_owner, target_complete_at IS NOT NULL AS complete
FROM jobs WHERE job_id = %(job_id)s
FOR UPDATE
