-- The delivery report, read through a server-side cursor (columns: domain/report.py COLUMNS).
SELECT item_id::text, guid, to_id, status::text, attempts, last_error_class, last_error, updated_at
FROM items
WHERE job_id = %(job)s::uuid
ORDER BY item_id
