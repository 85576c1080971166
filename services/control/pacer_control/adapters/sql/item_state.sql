SELECT item_id::text AS item_id, job_id::text AS job_id, status::text AS status
FROM items WHERE item_id = %(item)s::uuid
