-- pacer_retry_item (0004_operator_actions.sql) for each item, in the order given.
SELECT t.id::text AS item_id, r.outcome, r.new_item::text AS new_item, r.message
FROM unnest(%(ids)s::uuid[]) WITH ORDINALITY AS t(id, ord)
CROSS JOIN LATERAL pacer_retry_item(t.id, %(actor)s::text, %(priority)s::smallint) AS r
ORDER BY t.ord
