-- Items of a job a retry by filter picks: ended in the given status and not retried yet (an
-- item that already has a compensation is represented by that compensation from then on), in
-- id order within the job's range of ids (item_span.sql, as items.sql).
SELECT i.item_id::text AS item_id
FROM items i
WHERE i.job_id = %(job)s::uuid AND i.status = %(status)s::item_status
  AND (%(error_class)s::text IS NULL OR i.last_error_class = %(error_class)s::text)
  AND (%(guid)s::text IS NULL OR i.guid = %(guid)s::text)
  AND NOT EXISTS (SELECT 1 FROM items c WHERE c.compensates = i.item_id)
  AND i.item_id BETWEEN %(first)s::uuid AND %(last)s::uuid
  AND (%(after)s::uuid IS NULL OR i.item_id > %(after)s::uuid)  -- the next part of a retry in parts
ORDER BY i.item_id
LIMIT %(limit)s
