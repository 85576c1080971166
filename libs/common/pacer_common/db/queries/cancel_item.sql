-- Cancel one item (see pacer_cancel_item in migrations/0004_operator_actions.sql).
SELECT outcome, message FROM pacer_cancel_item(%(item)s::uuid, %(actor)s::text)
