-- A job's items a bulk cancel may pick (not taken by a sender yet), optionally of one guid,
-- in id order within the job's range of ids (item_span.sql, as items.sql).
-- Not locked: cancel_items.sql cancels each through pacer_cancel_item, whose guarded
-- transition locks the item and gives a cancel racing a claim one winner, as for a single
-- cancel (an item a sender takes in between answers too_late). Locking them here held every
-- picked row, and the one read past the part to tell whether more match, from this read to
-- the commit: a sender's batch claiming one of them waited all that time with its guid
-- leases locked.
SELECT i.item_id::text AS item_id
FROM items i
WHERE i.job_id = %(job)s::uuid AND i.status = ANY(%(statuses)s::item_status[])
  AND (%(guid)s::text IS NULL OR i.guid = %(guid)s::text)
  AND i.item_id BETWEEN %(first)s::uuid AND %(last)s::uuid
  AND (%(after)s::uuid IS NULL OR i.item_id > %(after)s::uuid)  -- the next part of a cancel in parts
ORDER BY i.item_id
LIMIT %(limit)s
