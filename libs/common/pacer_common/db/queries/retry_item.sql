-- Manual retry of one item (see pacer_retry_item in migrations/0004_operator_actions.sql).
SELECT outcome, new_item::text AS new_item, message
FROM pacer_retry_item(%(item)s::uuid, %(actor)s::text, %(priority)s::smallint)
