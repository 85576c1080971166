-- The first and the last item id of a job: the range of the primary key a report download
-- pages through (report_page.sql); NULLs when the job has no item. Read once a download,
-- through items_job_status: every item of the job, not the items of the jobs around it.
-- uuid has no min() or max(); its text sorts as the uuid does in the C collation (fixed-width
-- lowercase hex, the hyphens in the same places).
SELECT min(item_id::text COLLATE "C") AS first, max(item_id::text COLLATE "C") AS last
FROM items
WHERE job_id = %(job)s::uuid
