-- A few rendered messages of a job still to be sent (pending or waiting_retry), as they will be sent.
SELECT i.guid, i.to_id, COALESCE(i.content, j.item_content) AS content
FROM items i
JOIN jobs j ON j.job_id = i.job_id
WHERE i.job_id = %(job)s::uuid AND i.status IN ('pending', 'waiting_retry')
ORDER BY i.item_id
LIMIT %(limit)s
