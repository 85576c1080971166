-- The next ready items of one guid, to fill its sender's in-memory window: pending, not
-- held, due (no not_before, or past it), not already in the window. This is the one place
-- that decides which of a guid's queued items in Postgres go next: for now the most urgent
-- priority first, then the oldest.
SELECT c.*
FROM items i CROSS JOIN LATERAL pacer_item_command(i) c
WHERE i.guid = %(guid)s AND i.status = 'pending' AND NOT i.held
  AND (i.not_before IS NULL OR i.not_before <= now())
  AND i.item_id::text <> ALL(%(exclude)s::text[])
ORDER BY i.priority, i.created_at, i.item_id
LIMIT %(limit)s
