-- The delivery report, read through a server-side cursor (columns: domain/report.py COLUMNS).
-- No ORDER BY: a million-item report streams from its first row instead of waiting for a sort.
SELECT item_id::text, guid, to_id, status::text, attempts, last_error_class, last_error, updated_at
FROM items
WHERE job_id = %(job)s::uuid
