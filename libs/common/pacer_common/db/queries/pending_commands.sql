-- The item commands of those of the given items that are still pending, as published:
-- the reconciler re-dispatches with them.
SELECT c.*
FROM items i CROSS JOIN LATERAL pacer_item_command(i) c
WHERE i.item_id = ANY(%(ids)s::uuid[]) AND i.status = 'pending'
