-- A few rendered messages of a job, as they will be sent.
SELECT i.guid, i.to_id, i.content
FROM items i
WHERE i.job_id = %(job)s::uuid
ORDER BY i.item_id
LIMIT %(limit)s
