-- Manual retry of one item (see db/schema/functions/pacer_retry_item.sql).
SELECT outcome, new_item::text AS new_item, message
FROM pacer_retry_item(%(item)s::uuid, %(actor)s::text, %(priority)s::smallint)
