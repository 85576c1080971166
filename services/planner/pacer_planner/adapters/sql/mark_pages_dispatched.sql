UPDATE job_target_pages SET dispatched_at = now()
WHERE job_id = %(job_id)s AND page_no = ANY(%(pages)s::int[]) AND dispatched_at IS NULL
