SELECT page_no FROM job_target_pages
WHERE job_id = %(job_id)s AND dispatched_at IS NULL
ORDER BY page_no
