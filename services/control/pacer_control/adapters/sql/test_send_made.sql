-- A test send already made with this item id (its transaction committed before a retry of
-- the same request: the retry answers it instead of queueing a second message).
SELECT job_id::text AS job_id, item_id::text AS item_id, idem_key FROM items WHERE item_id = %(item)s::uuid
