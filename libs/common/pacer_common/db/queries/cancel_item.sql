-- Cancel one item (see db/schema/functions/pacer_cancel_item.sql).
SELECT outcome, message FROM pacer_cancel_item(%(item)s::uuid, %(actor)s::text)
