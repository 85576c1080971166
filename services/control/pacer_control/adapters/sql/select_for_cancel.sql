-- A job's items a bulk cancel may pick (not taken by a sender yet), optionally of one guid,
-- in id order within the job's range of ids (item_span.sql, as items.sql), locked in that order.
SELECT i.item_id::text AS item_id
FROM items i
WHERE i.job_id = %(job)s::uuid AND i.status = ANY(%(statuses)s::item_status[])
  AND (%(guid)s::text IS NULL OR i.guid = %(guid)s::text)
  AND i.item_id BETWEEN %(first)s::uuid AND %(last)s::uuid
  AND (%(after)s::uuid IS NULL OR i.item_id > %(after)s::uuid)  -- the next part of a cancel in parts
ORDER BY i.item_id
LIMIT %(limit)s
FOR UPDATE
