-- pacer_retry_items (db/schema/functions/pacer_retry_items.sql): every item's answer, in the
-- order given.
SELECT r.item_id::text AS item_id, r.outcome, r.new_item::text AS new_item, r.message
FROM pacer_retry_items(%(ids)s::uuid[], %(actor)s::text, %(priority)s::smallint) AS r
ORDER BY r.ord
