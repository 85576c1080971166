-- A test send already made as this job (its transaction committed before a retry of the same
-- request: the retry answers it instead of queueing a second message).
SELECT job_id::text AS job_id, item_id::text AS item_id, idem_key FROM items WHERE job_id = %(job)s::uuid
