-- A bulk cancel's items (cancel_items in core.py), in one statement: each through
-- pacer_cancel_item, the function a single item's cancel calls, so every item gets the answer
-- (outcome, message) its own cancel would, in the order given (by id: the order the items
-- are locked in, as pacer_transition locks a batch). No savepoint per item: a cancel of
-- 10,000 items was 30,000 round trips and 10,000 subtransactions in one transaction (past 64
-- a backend's subtransactions overflow its cache in the proc array, and every snapshot taken
-- meanwhile, in every backend, looks them up in pg_subtrans).
SELECT u.item_id::text AS item_id, c.outcome, c.message
FROM unnest(%(ids)s::uuid[]) WITH ORDINALITY AS u(item_id, ord)
CROSS JOIN LATERAL pacer_cancel_item(u.item_id, %(actor)s::text) AS c
ORDER BY u.ord
