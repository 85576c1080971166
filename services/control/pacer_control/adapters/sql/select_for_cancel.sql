-- A job's items a bulk cancel may pick (not taken by a sender yet), optionally of one guid,
-- in id order, locked in that order.
SELECT i.item_id::text AS item_id
FROM items i
WHERE i.job_id = %(job)s::uuid AND i.status = ANY(%(statuses)s::item_status[])
  AND (%(guid)s::text IS NULL OR i.guid = %(guid)s::text)
  AND (%(after)s::uuid IS NULL OR i.item_id > %(after)s::uuid)  -- the next part of a cancel in parts
ORDER BY i.item_id
LIMIT %(limit)s
FOR UPDATE
